"""Wire formats taskgate speaks, and which request path uses which.

- ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``: :data:`CHAT_COMPLETIONS`
- ``/v1/responses`` and ``/v1/responses/...``: :data:`RESPONSES`
- ``/v1/messages`` and ``/v1/messages/...``: :data:`ANTHROPIC_MESSAGES`

See :mod:`app.wire.base` for the contract each format implements.
"""

from __future__ import annotations

from app.wire.anthropic_messages import FORMAT as ANTHROPIC_MESSAGES
from app.wire.base import WireFormat
from app.wire.chat_completions import FORMAT as CHAT_COMPLETIONS
from app.wire.responses import FORMAT as RESPONSES

__all__ = [
    "ANTHROPIC_MESSAGES",
    "CHAT_COMPLETIONS",
    "RESPONSES",
    "UnknownWirePath",
    "format_for_path",
]

_EXACT: dict[str, WireFormat] = {
    "/v1/chat/completions": CHAT_COMPLETIONS,
    "/v1/completions": CHAT_COMPLETIONS,
    "/v1/embeddings": CHAT_COMPLETIONS,
    "/v1/responses": RESPONSES,
    "/v1/messages": ANTHROPIC_MESSAGES,
}
_PREFIX: tuple[tuple[str, WireFormat], ...] = (
    ("/v1/responses/", RESPONSES),
    ("/v1/messages/", ANTHROPIC_MESSAGES),
)


class UnknownWirePath(LookupError):
    """No wire format serves this request path."""


def format_for_path(path: str) -> WireFormat:
    """The wire format for a request path (a query string and a trailing ``/`` are
    ignored). Raises :class:`UnknownWirePath` for any other path."""
    path = path.split("?", 1)[0]
    if len(path) > 1:
        path = path.rstrip("/")
    found = _EXACT.get(path)
    if found is not None:
        return found
    for prefix, fmt in _PREFIX:
        if path.startswith(prefix):
            return fmt
    raise UnknownWirePath(path)
