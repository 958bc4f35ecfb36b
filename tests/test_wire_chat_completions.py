"""OpenAI chat completions wire format (app.wire.chat_completions)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from app.wire import CHAT_COMPLETIONS, UnknownWirePath, format_for_path
from app.wire.base import EventKind, ResponseSummary, ToolCall, Usage
from app.wire.sse import SSEDecoder
from tests.wire_support import canon, replay

FIXTURES = Path(__file__).parent / "fixtures" / "wire"
STREAM_TOOLS = (FIXTURES / "chat_stream_tools.sse").read_bytes()
STREAM_TEXT = (FIXTURES / "chat_stream_text.sse").read_bytes()
RESPONSE_TOOLS = json.loads((FIXTURES / "chat_response_tools.json").read_text())
REQUEST_TOOLS = json.loads((FIXTURES / "chat_request_tools.json").read_text())

C, D, H, T = EventKind.CONTENT, EventKind.DATA, EventKind.HEARTBEAT, EventKind.TERMINAL


def _replay(raw: bytes, cuts: Sequence[int] = ()) -> tuple[list[EventKind], ResponseSummary]:
    return replay(CHAT_COMPLETIONS, raw, cuts)


_canon = canon


def _feed_one(data: str, event: str = "") -> EventKind:
    return CHAT_COMPLETIONS.stream_observer().feed(event, data)


def _chunk(delta: dict[str, Any], index: int = 0) -> str:
    return json.dumps(
        {"object": "chat.completion.chunk", "choices": [{"index": index, "delta": delta}]}
    )


# --- streamed tool calls -------------------------------------------------------------

def test_single_byte_chunks_reconstruct_interleaved_parallel_calls_exactly() -> None:
    _, summary = _replay(STREAM_TOOLS, list(range(len(STREAM_TOOLS))))
    assert summary.tool_calls == [
        ToolCall("call_Qm1fX0rZ8kVb2T", "read_file", '{"path": "docs/café.md", "limit": 200}'),
        ToolCall(
            "call_Zp4dW7nHc3sLq9",
            "run_shell",
            '{"command": "echo \'déjà vu 🚀\' && ls -la src/", "timeout": 30}',
        ),
    ]


def test_tool_calls_are_keyed_by_choice_index_and_tool_index() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    first = {"index": 0, "id": "call_x", "function": {"name": "f", "arguments": ""}}
    for choice in (0, 1):
        observer.feed("", _chunk({"tool_calls": [{**first, "id": f"call_{choice}"}]}, choice))
    observer.feed("", _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}, 1))
    observer.feed("", _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"b":'}}]}, 0))
    observer.feed("", _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, 0))
    observer.feed("", _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "2}"}}]}, 1))
    assert observer.summary().tool_calls == [
        ToolCall("call_0", "f", '{"b":1}'),
        ToolCall("call_1", "f", '{"a":2}'),
    ]


def test_tool_call_deltas_without_index_start_a_call_per_new_id() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    observer.feed(
        "", _chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}]})
    )
    observer.feed("", _chunk({"tool_calls": [{"function": {"arguments": "}"}}]}))
    observer.feed(
        "", _chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "[]"}}]})
    )
    assert observer.summary().tool_calls == [ToolCall("a", "f", "{}"), ToolCall("b", "g", "[]")]


def test_usage_null_chunks_leave_usage_unknown() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    observer.feed("", '{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}')
    observer.feed("", "[DONE]")
    assert observer.summary() == ResponseSummary(tool_calls=[], usage=None, terminal_seen=True)


def test_usage_chunk_with_spaces_is_read() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    kind = observer.feed(
        "", '{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}'
    )
    assert kind is D
    assert observer.summary().usage == Usage(7, 3)


# --- classification ----------------------------------------------------------------


def test_text_stream_classification_in_order() -> None:
    kinds, summary = _replay(STREAM_TEXT)
    # role header, 11 content deltas, finish chunk, usage chunk, [DONE]; comment is no event
    assert kinds == [D] + [C] * 11 + [D, D, T]
    assert summary.usage == Usage(812, 12)
    assert summary.tool_calls == []


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (_chunk({"content": "hi"}), C),
        (_chunk({"reasoning_content": "think"}), C),
        (_chunk({"reasoning": "think"}), C),
        (_chunk({"refusal": "no"}), C),
        (_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}), C),
        ('{"choices": [{"index": 0, "text": "legacy", "finish_reason": null}]}', C),
        ('{"choices":[{"index":0,"delta":{"content" : "spaced"}}]}', C),
        (_chunk({"role": "assistant", "content": ""}), D),
        (_chunk({"content": None}), D),
        (_chunk({}), D),
        (_chunk({"tool_calls": []}), D),
        (_chunk({"content": ""})[:-1] + ', "x": "\\"content\\":\\"y\\""}', D),
        ('{"error": {"message": "overloaded", "type": "server_error", "code": null}}', T),
        ("[DONE]", T),
        (" [DONE] ", T),
        ("{not json", D),
        ("garbage", D),
        ('{"choices": "nope", "usage": {"prompt_tokens": "x"}}', D),
        (
            '{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 5}}]}}'
            "]}",
            C,
        ),
        ('{"choices": [null, {"delta": {"tool_calls": "bad"}}]}', D),
    ],
)
def test_event_classification(data: str, kind: EventKind) -> None:
    assert _feed_one(data) is kind


def test_terminal_only_after_done() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    observer.feed("", _chunk({"content": "x"}))
    assert not observer.summary().terminal_seen
    observer.feed("", "[DONE]")
    assert observer.summary().terminal_seen


# --- request parsing -----------------------------------------------------------------


def test_request_reads_trailing_tool_calls_and_results_only() -> None:
    view = CHAT_COMPLETIONS.parse_request(REQUEST_TOOLS)
    assert view.model == "qwen3-coder-plus"
    assert view.stream is True
    assert [c.call_id for c in view.tool_calls] == ["call_new_a", "call_new_b"]
    assert view.tool_calls[1] == ToolCall(
        "call_new_b", "run_shell", '{"command":"git diff --stat"}'
    )
    assert [r.call_id for r in view.tool_results] == ["call_new_a", "call_new_b"]
    assert view.tool_results[0].output == "PRICES = {'cafe': 3}"
    assert view.tool_results[1].output == (
        "src/menu.py | 2 +-\n1 file changed\n"
        '{"image_url":{"url":"data:image/png;base64,iVBORw0KGgo="},"type":"image_url"}'
    )
    assert all(r.is_error is None for r in view.tool_results)


def test_conversation_seed_is_first_system_and_first_user_message() -> None:
    view = CHAT_COMPLETIONS.parse_request(REQUEST_TOOLS)
    assert view.conversation_seed == (
        "You are Qwen Code, an interactive CLI agent specializing in software engineering tasks.\n"
        "This is the Qwen Code. We are setting up the context for our chat.\n"
        "My operating system is: linux"
    )


class _Untouchable(dict):  # type: ignore[type-arg]
    """An old history message: reading it fails the test."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parse_request read the old history")

    __getitem__ = get


def test_request_parsing_never_reads_old_history() -> None:
    old = [_Untouchable(role="tool", tool_call_id=f"old_{i}", content="x") for i in range(500)]
    messages = REQUEST_TOOLS["messages"]
    body = {**REQUEST_TOOLS, "messages": [*messages[:2], *old, *messages[-3:]]}
    view = CHAT_COMPLETIONS.parse_request(body)
    assert [r.call_id for r in view.tool_results] == ["call_new_a", "call_new_b"]


def test_long_history_yields_only_the_trailing_results() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(200):
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [{"id": f"c{i}", "function": {"name": "f", "arguments": "{}"}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"r{i}"})
    messages.append({"role": "user", "content": "keep going"})
    view = CHAT_COMPLETIONS.parse_request({"messages": messages})
    assert [(r.call_id, r.output) for r in view.tool_results] == [("c199", "r199")]
    assert view.tool_calls == [ToolCall("c199", "f", "{}")]


def test_first_request_has_no_tool_calls_or_results() -> None:
    view = CHAT_COMPLETIONS.parse_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert (view.tool_calls, view.tool_results, view.stream) == ([], [], False)
    assert view.conversation_seed == "hi"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"model": 3, "messages": "x", "stream": "yes"},
        {"messages": [None, 1, {"role": "tool"}, {"role": "assistant", "tool_calls": [None, {}]}]},
        {"messages": [{"role": "assistant", "tool_calls": "bad"}, {"role": "tool", "content": 5}]},
        {"input": ["embedding text"], "model": "text-embedding-3-small"},
    ],
)
def test_odd_request_shapes_never_raise(body: dict[str, Any]) -> None:
    view = CHAT_COMPLETIONS.parse_request(body)
    assert view.stream is False


def test_legacy_completions_prompt_is_the_seed() -> None:
    assert CHAT_COMPLETIONS.parse_request({"prompt": "Once upon"}).conversation_seed == "Once upon"


# --- non-streamed responses ----------------------------------------------------------


def test_non_streamed_response() -> None:
    summary = CHAT_COMPLETIONS.parse_response(RESPONSE_TOOLS)
    assert [c.call_id for c in summary.tool_calls] == ["call_Qm1fX0rZ8kVb2T", "call_Zp4dW7nHc3sLq9"]
    assert summary.usage == Usage(4182, 61, cache_read_input_tokens=3968)
    assert summary.terminal_seen


def test_embeddings_response_usage_has_no_output_tokens() -> None:
    body = {"object": "list", "data": [], "usage": {"prompt_tokens": 8, "total_tokens": 8}}
    assert CHAT_COMPLETIONS.parse_response(body).usage == Usage(8, 0)


@pytest.mark.parametrize(
    "body", [{}, {"choices": None}, {"choices": [1, {"message": 2}]}, {"usage": []}]
)
def test_odd_response_shapes_never_raise(body: dict[str, Any]) -> None:
    summary = CHAT_COMPLETIONS.parse_response(body)
    assert summary.tool_calls == [] and summary.usage is None


# --- errors and notices --------------------------------------------------------------


def test_error_body_shape() -> None:
    assert CHAT_COMPLETIONS.error_body("too many tokens", "limit_exceeded", "token_limit") == {
        "error": {
            "message": "too many tokens",
            "type": "limit_exceeded",
            "code": "token_limit",
            "param": None,
        }
    }


def test_stream_error_bytes_are_an_error_chunk_then_done() -> None:
    raw = CHAT_COMPLETIONS.stream_error("stream stalled", "upstream_error", "stream_stalled")
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")
    events = SSEDecoder().feed(raw)
    assert [e for e, _ in events] == ["", ""]
    error = json.loads(events[0][1])["error"]
    # the chat completions error object, its message the sentence itself (no nested document)
    assert error == {"message": "stream stalled", "type": "upstream_error", "code": "stream_stalled", "param": None}
    assert events[1][1] == "[DONE]"


def _sdk_client(body: bytes) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return openai.OpenAI(
        api_key="test",
        base_url="http://upstream.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )


def test_openai_sdk_raises_on_stream_error_after_partial_output() -> None:
    upstream = STREAM_TEXT.split(b"data: [DONE]")[0].split(b'"finish_reason":"stop"')[0]
    upstream = upstream[: upstream.rfind(b"\n\n") + 2]
    error = CHAT_COMPLETIONS.stream_error("stream stalled", "upstream_error", "stream_stalled")
    client = _sdk_client(upstream + error)
    text = []
    with pytest.raises(openai.APIError) as info:
        for chunk in client.chat.completions.create(model="m", messages=[], stream=True):
            text += [c.delta.content or "" for c in chunk.choices]
    assert "".join(text) == "The file lists a café menu 🍰 and nothing else."
    assert info.value.message == "stream stalled"
    assert info.value.code == "stream_stalled"
    assert info.value.type == "upstream_error"


def test_inject_notice_appends_a_system_message_and_changes_nothing_else() -> None:
    original = copy.deepcopy(REQUEST_TOOLS)
    injected = CHAT_COMPLETIONS.inject_notice(REQUEST_TOOLS, "Stop repeating read_file.")
    assert REQUEST_TOOLS == original
    assert injected["messages"] == [
        *original["messages"],
        {"role": "system", "content": "Stop repeating read_file."},
    ]
    assert {k: v for k, v in injected.items() if k != "messages"} == {
        k: v for k, v in original.items() if k != "messages"
    }


def test_inject_notice_on_legacy_prompt() -> None:
    assert CHAT_COMPLETIONS.inject_notice({"prompt": "a", "n": 1}, "b") == {
        "prompt": "a\n\nb",
        "n": 1,
    }


# --- routing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/chat/completions?x=1",
        "/v1/embeddings/",
    ],
)
def test_chat_paths_route_to_chat_completions(path: str) -> None:
    assert format_for_path(path) is CHAT_COMPLETIONS


@pytest.mark.parametrize("path", ["/v1/models", "/v1/chat", "/", "", "/v2/chat/completions"])
def test_unknown_paths_raise(path: str) -> None:
    with pytest.raises(UnknownWirePath):
        format_for_path(path)


def test_upstream_error_chunk_counts_as_the_streams_end() -> None:
    from app.wire import CHAT_COMPLETIONS

    observer = CHAT_COMPLETIONS.stream_observer()
    assert observer.feed("", '{"error": {"message": "overloaded", "type": "server_error"}}').name == "TERMINAL"
    assert observer.summary().terminal_seen  # the gateway adds no second error after it


# --- tool calls cut off by an upstream error (issue 10 item 5) ------------------------

def _call_delta(index: int, call_id: str | None, arguments: str, choice: int = 0) -> str:
    tc: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        tc.update(id=call_id, type="function")
        tc["function"]["name"] = "read_file"
    return json.dumps({"choices": [{"index": choice, "delta": {"tool_calls": [tc]}, "finish_reason": None}]})


def test_a_call_cut_off_by_an_error_chunk_is_not_a_tool_call() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    observer.feed("", _call_delta(0, "call_a", '{"path": "a"}'))
    observer.feed("", _call_delta(1, "call_b", '{"path": "b'))
    assert observer.feed("", '{"error": {"message": "overloaded"}}') is EventKind.TERMINAL
    assert observer.feed("", "[DONE]") is EventKind.TERMINAL  # [DONE] after an error ends nothing new
    assert [c.call_id for c in observer.summary().tool_calls] == ["call_a"]  # its JSON is whole


def test_finish_reason_or_done_completes_every_call_of_a_choice() -> None:
    observer = CHAT_COMPLETIONS.stream_observer()
    observer.feed("", _call_delta(0, "call_a", ""))  # a call without arguments
    observer.feed("", _call_delta(0, "call_c", "", choice=1))
    assert observer.summary().tool_calls == []
    observer.feed("", json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    assert [c.call_id for c in observer.summary().tool_calls] == ["call_a"]
    observer.feed("", "[DONE]")
    assert [c.call_id for c in observer.summary().tool_calls] == ["call_a", "call_c"]


def test_cached_tokens_are_part_of_prompt_tokens() -> None:
    usage = {"prompt_tokens": 2317, "completion_tokens": 61, "prompt_tokens_details": {"cached_tokens": 1920}}
    assert CHAT_COMPLETIONS.parse_response({"usage": usage}).usage == Usage(2317, 61, cache_read_input_tokens=1920)


def test_an_open_plain_answer_holds_no_tool_call_state() -> None:
    """An observer is held for the life of each open stream: one that has seen only
    content (no tool call, no finish_reason yet) holds no containers of its own (the
    empty set and three dicts it held were ~400 B per open stream)."""
    import gc
    import tracemalloc

    chunk = '{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}'
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        observer = CHAT_COMPLETIONS.stream_observer()
        for _ in range(3):
            assert observer.feed("", chunk) is EventKind.CONTENT
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 320, held  # the observer itself, with its slots
    assert observer.summary().tool_calls == []
