"""The configuration document's shape: providers, models and prices (pydantic).

A document is validated strictly: unknown keys, wrong types and dangling references are
errors, each reported with the key's path (``models[2].provider``) and, when it came from
a file, the line (:mod:`app.config.loader`). Prices are US dollars per million tokens.
"""

from __future__ import annotations

import fnmatch
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
    base_url: str
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    list_models: bool = False

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http:// or https:// URL")
        return v.rstrip("/")

    @field_validator("headers")
    @classmethod
    def _header_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name):
                raise ValueError(f"{name!r} is not a valid header name")
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"the value of {name!r} contains a line break or NUL")
        return {name.lower(): value for name, value in v.items()}


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


class GatewayConfig(_Strict):
    """The whole document: ``providers`` by name and the ordered ``models`` table."""

    providers: dict[str, Provider]
    models: list[ModelRoute] = Field(default_factory=list)

    @field_validator("providers")
    @classmethod
    def _names(cls, v: dict[str, Provider]) -> dict[str, Provider]:
        if not v:
            raise ValueError("at least one provider is needed")
        for name in v:
            if not PROVIDER_NAME.match(name):
                raise ValueError(f"provider name {name!r} must match {PROVIDER_NAME.pattern}")
        return v

    def reference_errors(self) -> list[tuple[tuple[str | int, ...], str]]:
        """``(path, message)`` for every ``models[].provider`` naming no provider."""
        known = ", ".join(sorted(self.providers))
        return [(("models", i, "provider"), f"unknown provider {r.provider!r} (known: {known})")
                for i, r in enumerate(self.models) if r.provider not in self.providers]
