"""The WireFormat contract, checked for each of the three formats.

What every format must do the same way (streamed tool calls reconstructed from any
chunking), and the members callers ask instead of branching on a format's name: the
provider kind it speaks, a refusal's status and type, a cut stream's error type, and
how streamed usage is asked for and hidden.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import render_error, task_stopped, unavailable, wire_status
from app.proxy.routes import wire_format
from app.wire import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, RESPONSES
from app.wire.base import Usage, WireFormat
from tests.wire_support import canon, cut_points, replay

FIXTURES = Path(__file__).parent / "fixtures" / "wire"


@dataclass(frozen=True)
class Case:
    fmt: WireFormat
    fixture: str  # the prefix of the fixture files
    usage: Usage  # what the tool-call fixtures report
    path: str  # the format's inference path


CASES = [
    Case(CHAT_COMPLETIONS, "chat", Usage(4182, 61, cache_read_input_tokens=3968), "/v1/chat/completions"),
    Case(RESPONSES, "responses", Usage(5210, 347, cache_read_input_tokens=4864), "/v1/responses"),
    # 2095 input + 310 cache creation + 1800 cache read; output from message_delta
    Case(ANTHROPIC_MESSAGES, "anthropic",
         Usage(4205, 142, cache_read_input_tokens=1800, cache_creation_input_tokens=310), "/v1/messages"),
]
IDS = [case.fmt.name for case in CASES]


def _stream(case: Case) -> bytes:
    return (FIXTURES / f"{case.fixture}_stream_tools.sse").read_bytes()


# --- streamed tool calls ---------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=IDS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_streamed_tool_calls_split_anywhere_match_the_non_streamed_response(case: Case, data: st.DataObject) -> None:
    raw = _stream(case)
    cuts = data.draw(cut_points(raw))
    _, summary = replay(case.fmt, raw, cuts)
    expected = case.fmt.parse_response(json.loads((FIXTURES / f"{case.fixture}_response_tools.json").read_text()))
    assert canon(summary.tool_calls) == canon(expected.tool_calls)
    assert summary.usage == expected.usage == case.usage
    assert summary.terminal_seen


# --- which API -------------------------------------------------------------------------

def test_each_format_names_the_provider_kind_it_speaks() -> None:
    assert [case.fmt.provider_kind for case in CASES] == ["openai", "openai", "anthropic"]


@pytest.mark.parametrize(("path", "headers", "expected"), [
    ("/v1/chat/completions", None, CHAT_COMPLETIONS),
    ("/v1/responses/resp_1", None, RESPONSES),
    ("/v1/messages/count_tokens", None, ANTHROPIC_MESSAGES),
    ("/v1/models", None, CHAT_COMPLETIONS),
    ("/v1/models", {}, CHAT_COMPLETIONS),
    ("/v1/models", {"anthropic-version": "2023-06-01"}, ANTHROPIC_MESSAGES),
    ("/v1/models/claude-x", {"anthropic-version": "2023-06-01"}, ANTHROPIC_MESSAGES),
    ("/v1/audio/speech", None, CHAT_COMPLETIONS),
])
def test_the_format_is_decided_once_from_the_path_and_an_anthropic_client_header(
        path: str, headers: dict[str, str] | None, expected: WireFormat) -> None:
    assert wire_format(path, headers) is expected


# --- refusals and cut streams ----------------------------------------------------------

@pytest.mark.parametrize(("case", "stopped", "unavailable_", "unauthorized"), [
    (CASES[0], (400, "task_stopped"), (503, "gateway_unavailable"), (401, "invalid_api_key")),
    (CASES[1], (400, "task_stopped"), (503, "gateway_unavailable"), (401, "invalid_api_key")),
    (CASES[2], (409, "invalid_request_error"), (503, "overloaded_error"), (401, "authentication_error")),
], ids=IDS)
def test_a_refusal_has_the_formats_status_and_type(case: Case, stopped: tuple[int, str],
                                                   unavailable_: tuple[int, str],
                                                   unauthorized: tuple[int, str]) -> None:
    fmt = case.fmt
    assert fmt.refusal(400, "task_stopped") == stopped
    assert fmt.refusal(503, "gateway_unavailable") == unavailable_
    assert fmt.refusal(401, "invalid_api_key") == unauthorized
    err = task_stopped("t1", "loop_detected", "1 request")
    assert wire_status(fmt, err) == stopped[0]
    body, headers = render_error(fmt, err)
    error = json.loads(body)["error"]
    assert error["type"] == stopped[1]
    assert (b"x-should-retry", b"false") in headers
    assert wire_status(fmt, unavailable()) == 503


def test_anthropic_types_for_statuses_it_does_not_name_are_api_error() -> None:
    assert ANTHROPIC_MESSAGES.refusal(429, "cost_reserved") == (429, "rate_limit_error")
    assert ANTHROPIC_MESSAGES.refusal(418, "teapot") == (418, "api_error")
    assert CHAT_COMPLETIONS.refusal(418, "teapot") == (418, "teapot")


@pytest.mark.parametrize(("case", "types"), [
    (CASES[0], ["upstream_stalled", "upstream_error", "task_stopped", "upstream_error"]),
    (CASES[1], ["upstream_stalled", "upstream_error", "task_stopped", "upstream_error"]),
    (CASES[2], ["api_error", "api_error", "api_error", "api_error"]),
], ids=IDS)
def test_a_cut_stream_ends_with_the_formats_error_type(case: Case, types: list[str]) -> None:
    kinds = ("stalled", "truncated", "repeated_output", "stopped")
    assert [case.fmt.stream_end_type(kind) for kind in kinds] == types


def test_a_stopped_stream_ends_with_the_refusals_type() -> None:
    from app.proxy.stream_end import error_type

    stop = task_stopped("t1", "loop_detected", "1 request")
    assert [error_type(case.fmt, "stopped", stop) for case in CASES] == [
        "task_stopped", "task_stopped", "invalid_request_error"]
    assert [error_type(case.fmt, "stalled", stop) for case in CASES] == [
        "upstream_stalled", "upstream_stalled", "api_error"]


# --- streamed usage --------------------------------------------------------------------

USAGE_ONLY = '{"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}'


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_only_chat_streams_need_usage_asked_for(case: Case) -> None:
    asks = case.fmt is CHAT_COMPLETIONS
    assert case.fmt.needs_stream_usage(case.path, {"stream": True}) is asks
    assert case.fmt.needs_stream_usage(case.path, {"stream": False}) is False
    assert case.fmt.needs_stream_usage(case.path, {"stream": True, "stream_options": {"include_usage": True}}) is False
    assert case.fmt.is_usage_only("", USAGE_ONLY) is asks
    assert case.fmt.is_usage_only("", '{"choices":[{"index":0}],"usage":{"total_tokens":3}}') is False
    assert case.fmt.is_usage_only("", "not json") is False
    body = {"stream": True, "stream_options": {"x": 1}}
    asked = case.fmt.with_stream_usage(body)
    assert asked is not body and body == {"stream": True, "stream_options": {"x": 1}}
    if asks:
        assert asked == {"stream": True, "stream_options": {"x": 1, "include_usage": True}}


def test_embeddings_never_get_usage_asked_for() -> None:
    assert CHAT_COMPLETIONS.needs_stream_usage("/v1/embeddings", {"stream": True}) is False
    assert CHAT_COMPLETIONS.needs_stream_usage("/v1/completions", {"stream": True}) is True
