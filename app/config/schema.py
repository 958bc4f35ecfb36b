"""The configuration document's shape: providers, models and prices (pydantic).

A document is validated strictly: unknown keys, wrong types and dangling references are
errors, each reported with the key's path (``models[2].provider``) and, when it came from
a file, the line (:mod:`app.config.loader`). Prices are US dollars per million tokens.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from app.wire.base import ProviderKind  # the provider API a wire format speaks

#: Provider names: what ``models[].provider`` refers to.
PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Characters that make a model name a glob (:func:`fnmatch.fnmatchcase`).
GLOB_CHARS = frozenset("*?[")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Price(_Strict):
    """USD per million tokens. ``cached_input_per_mtok`` prices input read from a prompt
    cache (OpenAI ``cached_tokens``, Anthropic ``cache_read_input_tokens``) and
    ``cache_write_per_mtok`` input written to one (Anthropic ``cache_creation_input_tokens``
    with the 5-minute TTL); each defaults to ``input_per_mtok`` when unset.
    ``cache_write_1h_per_mtok`` prices writes with the 1-hour TTL
    (``cache_creation.ephemeral_1h_input_tokens``); default twice ``input_per_mtok``
    (Anthropic's list price)."""

    input_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    output_per_mtok: float = Field(ge=0, allow_inf_nan=False)
    cached_input_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache_write_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache_write_1h_per_mtok: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @property
    def cached_input(self) -> float:
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok

    @property
    def cache_write(self) -> float:
        return self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok

    @property
    def cache_write_1h(self) -> float:
        return 2 * self.input_per_mtok if self.cache_write_1h_per_mtok is None else self.cache_write_1h_per_mtok


def http_url(v: str) -> str:
    """``v`` without a trailing ``/``; ``ValueError`` unless it is an http(s) URL."""
    if not re.match(r"^https?://[^/\s]+", v):
        raise ValueError("must be an http:// or https:// URL")
    return v.rstrip("/")


def header_values(v: dict[str, str]) -> dict[str, str]:
    """Headers to send upstream, names lower-cased; ``ValueError`` for an invalid name or
    a value holding a line break or NUL."""
    for name, value in v.items():
        if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name):
            raise ValueError(f"{name!r} is not a valid header name")
        if any(c in value for c in "\r\n\0"):
            raise ValueError(f"the value of {name!r} contains a line break or NUL")
    return {name.lower(): value for name, value in v.items()}


#: An upstream's http(s) URL (a provider's ``base_url``, an MCP server's ``url``).
HttpUrl = Annotated[str, AfterValidator(http_url)]
#: Headers sent upstream, checked by :func:`header_values`.
UpstreamHeaders = Annotated[dict[str, str], AfterValidator(header_values)]


class Provider(_Strict):
    """One upstream provider.

    ``kind`` is the wire format it speaks: ``openai`` (chat completions, completions,
    Responses, embeddings, models) or ``anthropic`` (messages, messages/count_tokens,
    models). ``base_url`` for ``openai`` ends in its version segment
    (``https://api.openai.com/v1``); for ``anthropic`` it is the host
    (``https://api.anthropic.com``). ``api_key`` is sent as ``Authorization: Bearer``
    (openai) or ``x-api-key`` (anthropic); ``headers`` are added to every request.
    ``list_models``: include the provider's own ``GET /models`` list in the gateway's.
    """

    kind: ProviderKind
    base_url: HttpUrl
    api_key: str | None = None
    headers: UpstreamHeaders = Field(default_factory=dict)
    list_models: bool = False



class ModelRoute(_Strict):
    """One ``models`` entry: requests whose ``model`` matches ``name`` (exactly, or as a
    glob such as ``claude-*``) go to ``provider``. ``upstream_model`` makes ``name`` an
    alias: only the forwarded body's ``model`` field is rewritten. ``default_max_output_tokens``
    is the output maximum taskgate adds to a request of a task with a dollar ceiling that
    sets none (so the provider enforces the bound the reservation assumes). ``max_output_tokens``
    bounds a request that sets no maximum of its own (for the cost reservation).
    ``price`` overrides the built-in price table."""

    name: str = Field(min_length=1, max_length=256)
    provider: str
    upstream_model: str | None = Field(default=None, min_length=1, max_length=256)
    max_output_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    default_max_output_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    price: Price | None = None

    @property
    def is_glob(self) -> bool:
        return any(c in GLOB_CHARS for c in self.name)

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.name) if self.is_glob else model == self.name

    @model_validator(mode="after")
    def _alias_is_exact(self) -> "ModelRoute":
        if self.upstream_model is not None and self.is_glob:
            raise ValueError("upstream_model needs an exact name, not a glob")
        return self


class McpTool(_Strict):
    """Settings of one tool of an MCP server: ``price_usd`` (US dollars a call, counted
    toward the task's dollar ceiling) and ``timeout_s`` (seconds the server may take to
    answer a ``tools/call``; the server's when unset)."""

    price_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    timeout_s: float | None = Field(default=None, gt=0, le=86_400, allow_inf_nan=False)


class McpServer(_Strict):
    """One upstream MCP server, reached at ``/mcp/<name>`` (:mod:`app.mcp`).

    ``url`` is its streamable-HTTP endpoint (``http://127.0.0.1:8000/mcp``); ``headers``
    are added to every request to it (``${ENV}`` secrets, as for providers; the client's
    task token is never sent); ``timeout_s`` bounds a ``tools/call`` (default 300 s);
    ``tools`` holds per-tool settings by tool name.
    """

    name: str
    url: HttpUrl
    headers: UpstreamHeaders = Field(default_factory=dict)
    timeout_s: float = Field(default=300.0, gt=0, le=86_400, allow_inf_nan=False)
    tools: dict[str, McpTool] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not PROVIDER_NAME.match(v):
            raise ValueError(f"must match {PROVIDER_NAME.pattern}")
        return v


    def tool_timeout_s(self, tool: str) -> float:
        """Seconds a ``tools/call`` of ``tool`` may take."""
        settings = self.tools.get(tool)
        return settings.timeout_s if settings is not None and settings.timeout_s is not None else self.timeout_s


class GatewayConfig(_Strict):
    """The whole document: ``providers`` by name, the ordered ``models`` table and the
    ``mcp_servers`` reached through ``/mcp/<name>``."""

    providers: dict[str, Provider]
    models: list[ModelRoute] = Field(default_factory=list)
    mcp_servers: list[McpServer] = Field(default_factory=list)

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, v: list[McpServer]) -> list[McpServer]:
        names = [s.name for s in v]
        if len(set(names)) != len(names):
            raise ValueError("MCP server names must be unique")
        return v

    def mcp_server(self, name: str) -> McpServer | None:
        """The MCP server called ``name``, or ``None``."""
        return next((s for s in self.mcp_servers if s.name == name), None)

    @field_validator("providers")
    @classmethod
    def _names(cls, v: dict[str, Provider]) -> dict[str, Provider]:
        if not v:
            raise ValueError("at least one provider is needed")
        for name in v:
            if not PROVIDER_NAME.match(name):
                raise ValueError(f"provider name {name!r} must match {PROVIDER_NAME.pattern}")
        return v
