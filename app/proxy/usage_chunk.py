"""Asking upstream for streamed usage on the client's behalf, and hiding the answer.

Streamed chat completions carry token usage only when the request sets
``stream_options.include_usage``. A task with a token or dollar limit needs it, so the
gateway adds it to the forwarded request (:func:`needs_usage`, :func:`with_usage`) and
drops the extra usage-only chunk (``"choices": []`` with ``usage``) from what the client
receives (:func:`strip_usage_chunks`): the client sees the stream it asked for, minus one
event it did not ask for. This is the one place the relay is not byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from app.task import Task

#: Paths whose streams report usage only when asked.
USAGE_ON_REQUEST_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
#: An SSE event boundary (a blank line) in any of the spec's line endings.
_BOUNDARY = re.compile(rb"(\r\n\r\n|\n\n|\r\r)")


def needs_usage(path: str, payload: Mapping[str, Any], task: Task) -> bool:
    """Whether to add ``stream_options.include_usage`` to this request: a streamed chat
    completion (or completion) of a task with ``token_limit`` or ``cost_limit_usd`` whose
    client did not ask for usage itself."""
    if path not in USAGE_ON_REQUEST_PATHS or payload.get("stream") is not True:
        return False
    if task.token_limit is None and task.cost_limit_usd is None:
        return False
    options = payload.get("stream_options")
    return not (isinstance(options, dict) and options.get("include_usage") is True)


def with_usage(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` with ``stream_options.include_usage`` set (other options kept)."""
    options = payload.get("stream_options")
    return {**payload, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}


def _is_usage_only(event: bytes) -> bool:
    data = b"\n".join(line[5:].lstrip(b" ") for line in event.splitlines() if line.startswith(b"data:"))
    try:
        chunk = json.loads(data)
    except ValueError:
        return False
    return isinstance(chunk, dict) and chunk.get("choices") == [] and chunk.get("usage") is not None


def strip_usage_chunks(out: bytes) -> bytes:
    """``out`` (whole SSE events) without its usage-only chat chunks; every other byte
    unchanged. Cheap when there is none: events are parsed only when ``usage`` occurs."""
    if b'"usage"' not in out:
        return out
    parts = _BOUNDARY.split(out)  # event, boundary, event, boundary, ..., tail
    kept = []
    for i in range(0, len(parts) - 1, 2):
        if not (b'"usage"' in parts[i] and _is_usage_only(parts[i])):
            kept += (parts[i], parts[i + 1])
    kept.append(parts[-1])
    return b"".join(kept)
