"""One framer per relayed stream (app.wire.sse.SSEFramer): the bytes it lets through
end at event boundaries, and the events it decodes are the incremental decoder's."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.wire.sse import SSEDecoder, SSEFramer

#: Pieces of event streams, the awkward ones included: every line ending, a BOM,
#: multi-byte and invalid UTF-8, comments, fields without a value or a colon.
TOKENS = [b"data:", b"data: ", b"data", b"event: x", b"event:", b"id: 1", b": c", b"{}", b"abc",
          b"\n", b"\n", b"\r", b"\r\n", b"\xef\xbb\xbf", "é🚀".encode(), b"\xff", b" "]


def _cut(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(raw), *(c for c in cuts if 0 <= c <= len(raw))})
    return [raw[a:b] for a, b in pairwise(points)]


def _framed(chunks: list[bytes]) -> tuple[list[bytes], bytes, list[tuple[str, str]]]:
    framer = SSEFramer()
    wholes, events = [], []
    for chunk in chunks:
        whole, completed = framer.feed(chunk)
        wholes.append(whole)
        events += completed
    rest, last = framer.close()
    return wholes, rest, events + last


def _decoded(raw: bytes) -> list[tuple[str, str]]:
    """What the incremental decoder makes of ``raw`` when a blank line follows it."""
    decoder = SSEDecoder()
    return decoder.feed(raw) + decoder.feed(b"\n\n") + decoder.flush()


@settings(max_examples=400, deadline=None)
@given(tokens=st.lists(st.sampled_from(TOKENS), max_size=60), cuts=st.lists(st.integers(0, 400), max_size=30))
def test_framed_once_the_bytes_and_events_are_the_decoders(tokens: list[bytes], cuts: list[int]) -> None:
    raw = b"".join(tokens)
    wholes, rest, events = _framed(_cut(raw, cuts))
    assert b"".join(wholes) + rest == raw  # byte for byte, nothing lost or added
    for whole in wholes:  # every run relayed ends with a blank line
        assert not whole or whole.endswith((b"\n\n", b"\r\r", b"\n\r"))
    assert events == _decoded(raw)


def test_the_usual_chunk_is_passed_through_as_is() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: {}\n\n") == (b"data: {}\n\n", [("", "{}")])  # the first chunk (BOM check)
    chunk = b'data: {"choices":[]}\n\n'
    whole, events = framer.feed(chunk)
    assert whole is chunk and events == [("", '{"choices":[]}')]


def test_an_incomplete_event_is_held_until_its_blank_line() -> None:
    framer = SSEFramer()
    assert framer.feed(b"event: a\ndata: 1\n\ndata: 2") == (b"event: a\ndata: 1\n\n", [("a", "1")])
    assert framer.held == len(b"data: 2")
    assert framer.feed(b"\n") == (b"", [])
    assert framer.feed(b"\n") == (b"data: 2\n\n", [("", "2")])
    assert framer.held == 0 and framer.close() == (b"", [])


@pytest.mark.parametrize("end", [b"\r\r", b"\n\r", b"\r\n\r"])
def test_an_event_ending_in_a_lone_cr_is_dispatched_at_once(end: bytes) -> None:
    # The incremental decoder waits for the byte after a trailing \r; the framer
    # knows the blank line is complete either way.
    raw = b"data: [DONE]" + end
    assert SSEFramer().feed(raw) == (raw, [("", "[DONE]")])


def test_close_reads_the_held_bytes_as_if_a_blank_line_followed() -> None:
    framer = SSEFramer()
    assert framer.feed(b"data: 1\n\nevent: message_stop\ndata: {}") == (b"data: 1\n\n", [("", "1")])
    assert framer.close() == (b"event: message_stop\ndata: {}", [("message_stop", "{}")])
    assert framer.close() == (b"", [])


def test_a_bom_is_dropped_from_the_first_event_only() -> None:
    framer = SSEFramer()
    assert framer.feed(b"\xef\xbb\xbfdata: a\n\n")[1] == [("", "a")]
    assert framer.feed(b"\xef\xbb\xbfdata: b\n\n")[1] == []  # later, U+FEFF is part of the field name


def test_overflow_when_too_much_is_held_or_an_event_is_too_large() -> None:
    framer = SSEFramer(max_event_bytes=64)
    assert framer.feed(b": keep-alive\n" * 6) == (b"", [])  # comment lines, no blank line
    assert "without ending an event" in (framer.overflow or "")
    framer = SSEFramer(max_event_bytes=64)
    assert framer.feed(b"data: " + b"y" * 40 + b"\n\n")[1] == [("", "y" * 40)] and framer.overflow is None
    framer.feed(b"data: " + b"x" * 80 + b"\n\n")  # whole, but over the bound
    assert "exceeds 64 bytes" in (framer.overflow or "")
    framer = SSEFramer(max_event_bytes=64)
    framer.feed(b"data: " + b"x" * 40 + b"\n")
    assert framer.overflow is None
    framer.feed(b"data: " + b"x" * 40 + b"\n")  # one event's data lines, still open
    assert "without ending an event" in (framer.overflow or "")
