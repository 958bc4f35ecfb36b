"""Helpers shared by the wire-format tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from hypothesis import strategies as st

from app.wire.base import EventKind, ResponseSummary, ToolCall, WireFormat
from app.wire.sse import SSEDecoder


def replay(fmt: WireFormat, raw: bytes, cuts: Sequence[int] = ()) -> tuple[list[EventKind], ResponseSummary]:
    """Feed ``raw`` SSE bytes, split at ``cuts``, through a decoder and ``fmt``'s observer;
    return each event's kind and the observer's summary."""
    points = sorted({0, len(raw), *(c for c in cuts if 0 <= c <= len(raw))})
    decoder, observer = SSEDecoder(), fmt.stream_observer()
    kinds = []
    for a, b in pairwise(points):
        kinds += [observer.feed(event, data) for event, data in decoder.feed(raw[a:b])]
    kinds += [observer.feed(event, data) for event, data in decoder.flush()]
    return kinds, observer.summary()


def canon(calls: list[ToolCall]) -> list[tuple[str, str, Any]]:
    """Tool calls with JSON-text arguments parsed, for comparing streamed and whole forms."""
    def args(value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    return [(c.call_id, c.name, args(c.arguments)) for c in calls]


def cut_points(raw: bytes) -> st.SearchStrategy[list[int]]:
    """Byte offsets to split ``raw`` at: anywhere, with extra weight inside multi-byte
    UTF-8 sequences (é, 🚀), where an incremental decoder is most likely to go wrong."""
    anywhere = st.integers(min_value=0, max_value=len(raw))
    multibyte = [i + 1 for i, b in enumerate(raw) if b >= 0xC0]
    return st.lists(st.one_of(anywhere, st.sampled_from(multibyte)) if multibyte else anywhere, max_size=80)
