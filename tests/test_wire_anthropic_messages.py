"""Anthropic Messages wire format (app.wire.anthropic_messages)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from app.wire import ANTHROPIC_MESSAGES, format_for_path
from app.wire.base import EventKind, ResponseSummary, ToolCall, ToolResult, Usage
from app.wire.sse import SSEDecoder
from tests.wire_support import canon, replay

FIXTURES = Path(__file__).parent / "fixtures" / "wire"
STREAM_TOOLS = (FIXTURES / "anthropic_stream_tools.sse").read_bytes()
STREAM_TEXT = (FIXTURES / "anthropic_stream_text.sse").read_bytes()
RESPONSE_TOOLS = json.loads((FIXTURES / "anthropic_response_tools.json").read_text())
REQUEST_TOOLS = json.loads((FIXTURES / "anthropic_request_tools.json").read_text())

C, D, H, T = EventKind.CONTENT, EventKind.DATA, EventKind.HEARTBEAT, EventKind.TERMINAL


def _events(raw: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return decoder.feed(raw) + decoder.flush()


def _replay(raw: bytes, cuts: Sequence[int] = ()) -> tuple[list[EventKind], ResponseSummary]:
    return replay(ANTHROPIC_MESSAGES, raw, cuts)


_canon = canon


def _feed(observer: Any, type_: str, **fields: Any) -> EventKind:
    return observer.feed(type_, json.dumps({"type": type_, **fields}))


# --- streamed tool calls -------------------------------------------------------------

def test_streamed_tool_use_arguments_are_the_parsed_input_object() -> None:
    _, summary = _replay(STREAM_TOOLS, list(range(len(STREAM_TOOLS))))
    assert summary.tool_calls == ANTHROPIC_MESSAGES.parse_response(RESPONSE_TOOLS).tool_calls
    assert summary.tool_calls[1].arguments == {
        "command": "echo 'déjà vu 🚀' && ls -la src/",
        "description": "List sources",
    }


def test_tool_use_without_deltas_has_empty_object_input() -> None:
    observer = ANTHROPIC_MESSAGES.stream_observer()
    block = {"type": "tool_use", "id": "toolu_1", "name": "TodoRead", "input": {}}
    assert _feed(observer, "content_block_start", index=0, content_block=block) is D
    _feed(
        observer,
        "content_block_delta",
        index=0,
        delta={"type": "input_json_delta", "partial_json": ""},
    )
    _feed(observer, "content_block_stop", index=0)
    assert observer.summary().tool_calls == [ToolCall("toolu_1", "TodoRead", {})]


def test_unparsable_partial_json_falls_back_to_raw_text() -> None:
    observer = ANTHROPIC_MESSAGES.stream_observer()
    block = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    _feed(observer, "content_block_start", index=3, content_block=block)
    for piece in ['{"comm', 'and": "ls']:
        _feed(
            observer,
            "content_block_delta",
            index=3,
            delta={"type": "input_json_delta", "partial_json": piece},
        )
    _feed(observer, "content_block_stop", index=3)
    assert observer.summary().tool_calls == [ToolCall("toolu_1", "Bash", '{"command": "ls')]


def test_tool_use_block_cut_off_by_an_error_is_not_a_tool_call() -> None:
    """Issue 10 item 5: only blocks that completed count toward the ledger."""
    observer = ANTHROPIC_MESSAGES.stream_observer()
    for index, call_id in enumerate(["toolu_1", "toolu_2"]):
        block = {"type": "tool_use", "id": call_id, "name": "Bash", "input": {}}
        _feed(observer, "content_block_start", index=index, content_block=block)
        _feed(observer, "content_block_delta", index=index,
              delta={"type": "input_json_delta", "partial_json": '{"command": "ls"}'})
    _feed(observer, "content_block_stop", index=0)
    assert _feed(observer, "error", error={"type": "overloaded_error", "message": "Overloaded"}) is T
    assert observer.summary().tool_calls == [ToolCall("toolu_1", "Bash", {"command": "ls"})]
    _feed(observer, "message_stop")  # a stream that ends normally: every block counts
    assert [c.call_id for c in observer.summary().tool_calls] == ["toolu_1", "toolu_2"]


def test_usage_is_cumulative_not_summed() -> None:
    observer = ANTHROPIC_MESSAGES.stream_observer()
    _feed(observer, "message_start", message={"usage": {"input_tokens": 10, "output_tokens": 1}})
    _feed(observer, "message_delta", delta={}, usage={"output_tokens": 5})
    _feed(observer, "message_delta", delta={}, usage={"output_tokens": 9, "input_tokens": 12})
    assert observer.summary().usage == Usage(input_tokens=12, output_tokens=9)


def test_no_usage_reported_means_none() -> None:
    observer = ANTHROPIC_MESSAGES.stream_observer()
    _feed(observer, "message_stop")
    assert observer.summary() == ResponseSummary([], None, True)


# --- classification ----------------------------------------------------------------


def test_text_stream_classification_in_order() -> None:
    kinds, summary = _replay(STREAM_TEXT)
    # message_start, block start, ping, 6 text deltas, block stop, message_delta, stop
    assert kinds == [D, D, H] + [C] * 6 + [D, D, T]
    assert summary == ResponseSummary([], Usage(3120, 9), True)


def test_tool_stream_classification_in_order() -> None:
    kinds, _ = _replay(STREAM_TOOLS)
    expected = []
    for name, _ in _events(STREAM_TOOLS):
        if name == "content_block_delta":
            expected.append(C)
        else:
            expected.append({"ping": H, "message_stop": T}.get(name, D))
    assert kinds == expected
    assert kinds.count(H) == 1 and kinds[-1] is T


@pytest.mark.parametrize(
    ("event", "data", "kind"),
    [
        ("ping", '{"type": "ping"}', H),
        ("", '{"type": "ping"}', H),
        ("message_stop", '{"type":"message_stop"}', T),
        ("", '{"type":"message_stop"}', T),
        ("content_block_delta", '{"delta":{"type":"thinking_delta","thinking":"x"}}', C),
        ("content_block_delta", '{"delta":{"type":"input_json_delta"', C),
        ("content_block_start", '{"index":0,"content_block":{"type":"text","text":""}}', D),
        ("content_block_start", '{"index":"x","content_block":{"type":"tool_use"}}', D),
        ("error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', T),
        ("message_start", "nope", D),
        ("message_delta", '{"usage": "bad"}', D),
        ("", "garbage", D),
    ],
)
def test_event_classification(event: str, data: str, kind: EventKind) -> None:
    assert ANTHROPIC_MESSAGES.stream_observer().feed(event, data) is kind


# --- request parsing -----------------------------------------------------------------


def test_request_reads_trailing_tool_use_and_results_only() -> None:
    view = ANTHROPIC_MESSAGES.parse_request(REQUEST_TOOLS)
    assert (view.model, view.stream) == ("claude-sonnet-4-5-20250929", True)
    assert view.tool_calls == [
        ToolCall("toolu_new_a", "Read", {"file_path": "/home/dev/project/src/menu.py"}),
        ToolCall("toolu_new_b", "Grep", {"pattern": "café", "path": "tests"}),
    ]
    assert view.tool_results == [
        ToolResult("toolu_new_a", "     1\tPRICES = {'cafe': 3}", None),
        ToolResult("toolu_new_b", "tests/test_menu.py", False),
    ]


def test_is_error_true_is_kept() -> None:
    messages = REQUEST_TOOLS["messages"][:3]
    view = ANTHROPIC_MESSAGES.parse_request({"messages": messages})
    assert view.tool_results == [ToolResult("toolu_old_1", "1 failed", True)]
    assert [c.call_id for c in view.tool_calls] == ["toolu_old_1"]


def test_conversation_seed_is_system_and_first_user_message() -> None:
    assert ANTHROPIC_MESSAGES.parse_request(REQUEST_TOOLS).conversation_seed == (
        "You are Claude Code, Anthropic's official CLI for Claude.\n"
        "You are an interactive CLI tool that helps users with software engineering tasks.\n"
        "<system-reminder>This is a reminder.</system-reminder>\n"
        "why does the café test fail?"
    )
    body = {"system": "S", "messages": [{"role": "user", "content": "hi"}]}
    assert ANTHROPIC_MESSAGES.parse_request(body).conversation_seed == "S\nhi"


class _Untouchable(dict):  # type: ignore[type-arg]
    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parse_request read the old history")

    __getitem__ = get


def test_request_parsing_never_reads_old_history() -> None:
    messages = REQUEST_TOOLS["messages"]
    old = [_Untouchable(role="user", content=[]) for _ in range(500)]
    view = ANTHROPIC_MESSAGES.parse_request({"messages": [messages[0], *old, *messages[3:]]})
    assert [r.call_id for r in view.tool_results] == ["toolu_new_a", "toolu_new_b"]


def test_long_history_yields_only_the_trailing_results() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(200):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"r{i}"}],
            }
        )
    view = ANTHROPIC_MESSAGES.parse_request({"messages": messages})
    assert view.tool_results == [ToolResult("t199", "r199", None)]
    assert view.tool_calls == [ToolCall("t199", "f", {})]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"system": 5, "messages": "x"},
        {
            "messages": [
                None,
                {"role": "assistant", "content": "text"},
                {"role": "user", "content": [1, {"type": "tool_result"}]},
            ]
        },
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": None}]}]},
    ],
)
def test_odd_request_shapes_never_raise(body: dict[str, Any]) -> None:
    ANTHROPIC_MESSAGES.parse_request(body)


# --- non-streamed responses ----------------------------------------------------------


def test_non_streamed_response() -> None:
    summary = ANTHROPIC_MESSAGES.parse_response(RESPONSE_TOOLS)
    assert [(c.call_id, c.name) for c in summary.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", "Read"),
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "Bash"),
    ]
    assert summary.usage == Usage(4205, 142, cache_read_input_tokens=1800, cache_creation_input_tokens=310)
    assert summary.terminal_seen


@pytest.mark.parametrize("body", [{}, {"content": "x"}, {"content": [None, 1]}, {"usage": []}])
def test_odd_response_shapes_never_raise(body: dict[str, Any]) -> None:
    assert ANTHROPIC_MESSAGES.parse_response(body).tool_calls == []


# --- errors and notices --------------------------------------------------------------


def test_error_body_shape_has_no_code() -> None:
    assert ANTHROPIC_MESSAGES.error_body("Budget exceeded", "rate_limit_error", "token_limit") == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Budget exceeded"},
    }


def test_stream_error_is_an_error_event() -> None:
    raw = ANTHROPIC_MESSAGES.stream_error("stream stalled", "api_error", "stream_stalled")
    assert raw.startswith(b"event: error\ndata: ")
    [(event, data)] = _events(raw)
    assert event == "error"
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "api_error", "message": "stream stalled"},
    }


def test_anthropic_sdk_raises_on_stream_error_after_partial_output() -> None:
    upstream = STREAM_TEXT[: STREAM_TEXT.rfind(b"event: content_block_stop")]
    raw = upstream + ANTHROPIC_MESSAGES.stream_error(
        "stream stalled", "api_error", "stream_stalled"
    )

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=raw)

    client = anthropic.Anthropic(
        api_key="test",
        base_url="http://upstream.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
    text = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for event in client.messages.create(model="m", max_tokens=1, messages=[], stream=True):
            if event.type == "content_block_delta":
                text.append(event.delta.text)
    assert "".join(text) == "Both files are fine — merci 👍"
    assert "stream stalled" in str(info.value)


def test_inject_notice_appends_a_text_block_to_the_last_user_message() -> None:
    original = copy.deepcopy(REQUEST_TOOLS)
    injected = ANTHROPIC_MESSAGES.inject_notice(REQUEST_TOOLS, "Stop.")
    assert REQUEST_TOOLS == original
    assert injected["messages"][:-1] == original["messages"][:-1]
    last = original["messages"][-1]
    assert injected["messages"][-1] == {
        **last,
        "content": [*last["content"], {"type": "text", "text": "Stop."}],
    }
    assert {k: v for k, v in injected.items() if k != "messages"} == {
        k: v for k, v in original.items() if k != "messages"
    }


def test_inject_notice_converts_string_user_content() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert ANTHROPIC_MESSAGES.inject_notice(body, "Stop.")["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "Stop."}],
        }
    ]
    assert body == {"messages": [{"role": "user", "content": "hi"}]}


def test_inject_notice_after_an_assistant_message_adds_a_user_message() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "prefill"}]
    assert ANTHROPIC_MESSAGES.inject_notice({"messages": messages}, "Stop.")["messages"] == [
        *messages,
        {"role": "user", "content": [{"type": "text", "text": "Stop."}]},
    ]


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/messages?beta=true", "/v1/messages/count_tokens"]
)
def test_messages_paths_route_to_anthropic_messages(path: str) -> None:
    assert format_for_path(path) is ANTHROPIC_MESSAGES


def test_upstream_error_event_is_terminal() -> None:
    from app.wire import ANTHROPIC_MESSAGES

    observer = ANTHROPIC_MESSAGES.stream_observer()
    kind = observer.feed("error", '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}')
    assert kind.name == "TERMINAL" and observer.summary().terminal_seen


# --- usage: cache tokens and server-side compaction (issue 10 item 4) -----------------

COMPACTION_USAGE = {
    "input_tokens": 212, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 14,
    "iterations": [
        {"type": "compaction", "input_tokens": 240, "cache_creation_input_tokens": 0,
         "cache_read_input_tokens": 61310, "output_tokens": 97},
        {"type": "message", "input_tokens": 212, "cache_creation_input_tokens": 0,
         "cache_read_input_tokens": 0, "output_tokens": 14},
    ],
}
COMPACTION_TOTAL = Usage(240 + 61310 + 212, 97 + 14, cache_read_input_tokens=61310)


def test_compaction_iterations_count_in_a_stream() -> None:
    """message_delta's top-level usage covers only the last iteration and resets the
    cache-read count from message_start; the compaction step is only in iterations."""
    observer = ANTHROPIC_MESSAGES.stream_observer()
    _feed(observer, "message_start", message={"usage": {
        "input_tokens": 240, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 61310, "output_tokens": 0}})
    _feed(observer, "message_delta", delta={"stop_reason": "end_turn"}, usage=COMPACTION_USAGE)
    _feed(observer, "message_stop")
    assert observer.summary().usage == COMPACTION_TOTAL


def test_compaction_iterations_count_in_a_body() -> None:
    body = {"type": "message", "content": [{"type": "compaction", "content": "Summary"}], "usage": COMPACTION_USAGE}
    assert ANTHROPIC_MESSAGES.parse_response(body).usage == COMPACTION_TOTAL


def test_iterations_never_count_less_than_the_top_level_usage() -> None:
    usage = {"input_tokens": 900, "output_tokens": 40,
             "iterations": [{"type": "message", "input_tokens": 300, "output_tokens": 10}]}
    assert ANTHROPIC_MESSAGES.parse_response({"usage": usage}).usage == Usage(900, 40)


def test_cache_reads_and_writes_count_as_input_and_are_broken_out() -> None:
    usage = {"input_tokens": 18, "cache_creation_input_tokens": 1536, "cache_read_input_tokens": 11264,
             "output_tokens": 42}
    assert ANTHROPIC_MESSAGES.parse_response({"usage": usage}).usage == Usage(
        18 + 1536 + 11264, 42, cache_read_input_tokens=11264, cache_creation_input_tokens=1536)
