"""SSE decoding per the WHATWG event stream interpretation (app.wire.sse)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.wire.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEEventTooLarge


def _decode(chunks: list[bytes], **kwargs: int) -> list[tuple[str, str]]:
    decoder = SSEDecoder(**kwargs)
    events: list[tuple[str, str]] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.flush()


def _cut(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(raw), *(c for c in cuts if 0 <= c <= len(raw))})
    return [raw[a:b] for a, b in pairwise(points)]


def test_data_event_without_event_field_has_empty_event_name() -> None:
    assert _decode([b"data: hello\n\n"]) == [("", "hello")]


def test_event_field_names_the_event() -> None:
    assert _decode([b"event: ping\ndata: {}\n\n"]) == [("ping", "{}")]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_spec_line_ending_works(eol: bytes) -> None:
    raw = b"event: a" + eol + b"data: 1" + eol + eol + b"data: 2" + eol + eol
    assert _decode([raw]) == [("a", "1"), ("", "2")]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    # If "\r" | "\n" counted as two line ends, "data: a" would dispatch alone.
    assert _decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [("", "a\nb")]


def test_lone_cr_at_end_of_stream_is_completed_by_flush() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == []  # the last \r might still be a \r\n
    assert decoder.flush() == [("", "a")]


def test_comment_lines_are_not_events_and_do_not_break_an_event() -> None:
    raw = b": OPENROUTER PROCESSING\n\ndata: x\n: keep-alive\ndata: y\n\n:\n\n"
    assert _decode([raw]) == [("", "x\ny")]


def test_multiline_data_is_joined_with_newline() -> None:
    assert _decode([b'data: {\ndata:   "a": 1\ndata: }\n\n']) == [("", '{\n  "a": 1\n}')]


def test_only_one_space_after_colon_is_stripped_and_colon_optional() -> None:
    assert _decode([b"data:x\n\ndata:  y\n\ndata: a:b\n\n"]) == [("", "x"), ("", " y"), ("", "a:b")]


def test_data_line_without_colon_is_an_empty_data_line() -> None:
    assert _decode([b"data\n\n"]) == [("", "")]


def test_block_without_data_lines_dispatches_nothing_and_resets_event_name() -> None:
    assert _decode([b"event: lonely\n\ndata: x\n\n"]) == [("", "x")]


def test_id_and_retry_lines_never_dispatch_on_their_own() -> None:
    assert _decode([b"id: 7\nretry: 100\n\n\n\nunknown: 1\n\n"]) == []


def test_chunk_boundaries_inside_multibyte_utf8() -> None:
    raw = "data: café 🚀 ✨\n\n".encode()
    assert _decode([raw[i : i + 1] for i in range(len(raw))]) == [("", "café 🚀 ✨")]


def test_leading_byte_order_mark_is_dropped_even_when_split() -> None:
    assert _decode([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [("", "x")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert _decode([b"data: \xff\xfe ok\n\n"]) == [("", "\ufffd\ufffd ok")]


def test_flush_discards_an_unterminated_event_and_resets() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"event: e\ndata: partial\n") == []
    assert decoder.flush() == []
    assert decoder.feed(b"data: next\n\n") == [("", "next")]


def test_default_bound_is_16_mib() -> None:
    assert DEFAULT_MAX_EVENT_BYTES == 16 * 1024 * 1024


def test_oversized_unterminated_line_raises() -> None:
    decoder = SSEDecoder(max_event_bytes=100)
    decoder.feed(b"data: " + b"x" * 60)
    with pytest.raises(SSEEventTooLarge) as info:
        decoder.feed(b"x" * 60)
    assert info.value.limit == 100
    assert "100" in str(info.value)


def test_oversized_line_arriving_in_one_chunk_raises() -> None:
    with pytest.raises(SSEEventTooLarge):
        SSEDecoder(max_event_bytes=100).feed(b"data: " + b"x" * 200 + b"\n")


def test_oversized_event_of_many_short_data_lines_raises() -> None:
    with pytest.raises(SSEEventTooLarge):
        SSEDecoder(max_event_bytes=100).feed(b"data: 0123456789\n" * 20)


def test_events_under_the_bound_pass_and_the_count_resets_per_event() -> None:
    event = b"data: " + b"x" * 80 + b"\n\n"
    assert _decode([event] * 5, max_event_bytes=100) == [("", "x" * 80)] * 5
    small = [event[i : i + 7] for i in range(0, len(event), 7)] * 5
    assert len(_decode(small, max_event_bytes=100)) == 5


_LINE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=20
)
_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["", "message_start", "response.output_text.delta", "é"]),
        st.lists(_LINE_TEXT, max_size=3),
        st.booleans(),  # a comment line inside the block
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    events=_EVENTS,
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=40),
)
def test_any_stream_split_anywhere_decodes_like_the_spec(
    events: list[tuple[str, list[str], bool]], eol: str, cuts: list[int]
) -> None:
    text = ""
    expected: list[tuple[str, str]] = []
    pieces: list[bytes] = []  # one chunk per event, as providers usually send them
    for name, lines, comment in events:
        start = len(text.encode())
        if name:
            text += f"event: {name}{eol}"
        if comment:
            text += f": ping{eol}"
        for line in lines:
            text += f"data: {line}{eol}"
        text += eol
        pieces.append(text.encode()[start:])
        if lines:
            expected.append((name, "\n".join(lines)))
    raw = text.encode()
    assert _decode(_cut(raw, cuts)) == expected
    assert _decode([raw]) == expected
    assert _decode(pieces) == expected


def test_line_splitter_and_sse_sniffing() -> None:
    from app.wire.sse import LineSplitter, looks_like_sse

    lines = LineSplitter()
    assert lines.decode("a") == [] and lines.decode("b\r") == [] and lines.decode("\nc\rd\n\n") == ["ab", "c", "d", ""]
    assert lines.decode("tail") == [] and lines.flush() == ["tail"] and lines.flush() == []
    assert lines.decode("x\r") == [] and lines.flush() == ["x"]
    for prefix in (b"data: {}", b"event: message_start\n", b": ping\n", b"\xef\xbb\xbfdata:", b"\n\nid: 1",
                   b"retry: 5"):
        assert looks_like_sse(prefix), prefix
    for prefix in (b'{"id": 1}', b"[1]", b"", b"hello", b"<html>"):
        assert not looks_like_sse(prefix), prefix
