"""Which proxied endpoints exist: an explicit allowlist of (method, path template).

Nothing under ``/v1`` leaves the gateway unless it matches an entry here. A request
matches when its method is the entry's and its *decoded* path has the template's
segments: literal segments are equal, a ``{name}`` segment is one path segment of
RFC 3986 ``pchar`` characters other than ``%`` (letters, digits, ``-._~`` and
``!$&'()*+,;=:@``), never ``.`` or ``..``. The *raw* path (as the client sent it) may
not encode ``/``, ``.`` or ``\\`` (``%2f``, ``%2e``, ``%5c``); no path may hold a dot
segment, an empty segment or a backslash. So the path forwarded upstream is exactly the
decoded path that matched, and no spelling of it can climb out of ``/v1``.

Each endpoint has a ``kind``:

- ``inference``: runs a model; admitted (one unit of the task's allowance), parsed by
  its wire format, watched by the loop guard.
- ``free``: token counting; authenticated, forwarded, never counted.
- ``extra``: added by the operator (``TASKGATE_EXTRA_ENDPOINTS``). An extra ``GET`` is
  free; an extra ``POST`` (files, batches: it may cost money) is admitted like an
  inference request, its body forwarded as is without parsing.

Pure functions; :func:`parse_endpoints` raises :class:`ValueError` naming the bad entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

#: What an endpoint is (:attr:`Endpoint.kind`), as the module docstring says.
EndpointKind = Literal["inference", "free", "extra"]
INFERENCE: Final[EndpointKind] = "inference"
FREE: Final[EndpointKind] = "free"
EXTRA: Final[EndpointKind] = "extra"

#: Methods an operator may add (the proxy routes only these).
METHODS = ("GET", "POST")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One allowed endpoint: ``method`` (``GET``/``POST``), ``template`` (e.g.
    ``/v1/models/{id}``) and ``kind`` (``inference``, ``free`` or ``extra``)."""

    method: str
    template: str
    kind: EndpointKind

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(self.template.split("/")[1:])


DEFAULT_ENDPOINTS: tuple[Endpoint, ...] = (
    *(Endpoint("POST", p, INFERENCE) for p in (
        "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings",
        "/v1/messages")),
    Endpoint("POST", "/v1/messages/count_tokens", FREE),
    Endpoint("POST", "/v1/responses/input_tokens", FREE),
    Endpoint("GET", "/v1/models", FREE),
    Endpoint("GET", "/v1/models/{id}", FREE),
)

_PARAM = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
_LITERAL = re.compile(r"[A-Za-z0-9_.~-]+")
_PCHAR = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@]+")
_ENCODED_SEPARATOR = re.compile(rb"%(2[fFeE]|5[cC])")


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """Parse ``TASKGATE_EXTRA_ENDPOINTS``: a comma list of ``METHOD /v1/path`` with
    ``{name}`` for one variable segment, e.g. ``GET /v1/files/{id}, POST /v1/batches``.
    Empty text gives no endpoints. Raises :class:`ValueError` naming a bad entry."""
    out: list[Endpoint] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        method, _, template = entry.partition(" ")
        method, template = method.upper(), template.strip()
        if method not in METHODS:
            raise ValueError(f"{entry!r}: the method must be one of {', '.join(METHODS)}")
        parts = template.split("/")
        if (parts[:2] != ["", "v1"] or len(parts) < 3
                or not all(_LITERAL.fullmatch(p) or _PARAM.fullmatch(p) for p in parts[2:])
                or any(p in (".", "..") for p in parts)):
            raise ValueError(f"{entry!r}: the path must look like /v1/name/{{id}} "
                             "(literal segments of letters, digits, '-._~', or {name})")
        out.append(Endpoint(method, template, EXTRA))
    return tuple(out)


def safe_path(path: str, raw_path: bytes | None) -> bool:
    """Whether a request path can be matched at all: the raw path encodes no ``/``,
    ``.`` or ``\\``, and the decoded path has no dot segment, empty segment or
    backslash."""
    if raw_path is not None and _ENCODED_SEPARATOR.search(raw_path):
        return False
    if "\\" in path:
        return False
    segments = path.split("/")[1:]
    return all(s and s not in (".", "..") for s in segments)


def match(endpoints: tuple[Endpoint, ...], method: str, path: str,
          raw_path: bytes | None = None) -> Endpoint | None:
    """The endpoint allowing ``method`` on the decoded ``path`` (``raw_path``: the path
    bytes as sent, when the server provides them), or ``None``: not forwarded."""
    if not safe_path(path, raw_path):
        return None
    segments = path.split("/")[1:]
    for endpoint in endpoints:
        if endpoint.method != method:
            continue
        pattern = endpoint.segments
        if len(pattern) != len(segments):
            continue
        for want, got in zip(pattern, segments):
            if want[0] == "{":
                if not _PCHAR.fullmatch(got):
                    break
            elif want != got:
                break
        else:
            return endpoint
    return None
