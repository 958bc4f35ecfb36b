"""Asking upstream for streamed usage on the client's behalf, and hiding the answer.

Some streams carry token usage only when the request asks (chat completions:
``stream_options.include_usage``; the wire format says,
:meth:`app.wire.base.WireFormat.needs_stream_usage`). Every task's tokens and dollars
need it, so the gateway asks in the forwarded request (:func:`needs_usage`,
:meth:`~app.wire.base.WireFormat.with_stream_usage`; with ``TASKGATE_STREAM_USAGE=false``
only for tasks with a token or dollar limit) and drops the extra usage-only event
(:meth:`~app.wire.base.WireFormat.is_usage_only`) from what the client receives
(:func:`strip_usage_chunks`): the client sees the stream it asked for, minus one event
it did not ask for. This is the one place the relay is not byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from app.task import Task
from app.wire.base import WireFormat
from app.wire.sse import block_events

#: An SSE event boundary (a blank line) in any of the spec's line endings.
_BOUNDARY = re.compile(rb"(\r\n\r\n|\n\n|\r\r)")


def needs_usage(fmt: WireFormat, path: str, payload: Mapping[str, Any], task: Task, always: bool = True) -> bool:
    """Whether to ask upstream for usage on this request's stream: a request whose stream
    would carry no usage unless asked (``fmt``'s
    :meth:`~app.wire.base.WireFormat.needs_stream_usage`), of any task (``always``,
    ``TASKGATE_STREAM_USAGE``) or else of a task with ``token_limit`` or ``cost_limit_usd``."""
    if not always and task.token_limit is None and task.cost_limit_usd is None:
        return False
    return fmt.needs_stream_usage(path, payload)


def strip_usage_chunks(out: bytes, is_usage_only: Callable[[str, str], bool]) -> bytes:
    """``out`` (whole SSE events) without the events ``is_usage_only(event, data)``
    picks; every other byte unchanged. (A block between two blank lines of the same
    line ending that holds several events, possible only with mixed line endings, is
    dropped only when all of them are usage-only.)"""
    parts = _BOUNDARY.split(out)  # event, boundary, event, boundary, ..., tail
    kept: list[bytes] = []
    for i in range(0, len(parts) - 1, 2):
        events = block_events(parts[i])
        if not (events and all(is_usage_only(event, data) for event, data in events)):
            kept += (parts[i], parts[i + 1])
    kept.append(parts[-1])
    return b"".join(kept)
