"""OpenAI Responses API wire format (app.wire.responses)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from app.wire import RESPONSES, format_for_path
from app.wire.base import EventKind, ResponseSummary, ToolCall, ToolResult, Usage
from app.wire.sse import SSEDecoder
from tests.wire_support import canon, replay

FIXTURES = Path(__file__).parent / "fixtures" / "wire"
STREAM_TOOLS = (FIXTURES / "responses_stream_tools.sse").read_bytes()
STREAM_TEXT = (FIXTURES / "responses_stream_text.sse").read_bytes()
RESPONSE_TOOLS = json.loads((FIXTURES / "responses_response_tools.json").read_text())
REQUEST_TOOLS = json.loads((FIXTURES / "responses_request_tools.json").read_text())

C, D, H, T = EventKind.CONTENT, EventKind.DATA, EventKind.HEARTBEAT, EventKind.TERMINAL

ARGS_READ = '{"path": "docs/café.md", "limit": 200}'
PATCH = (
    "*** Begin Patch\n*** Update File: notes/résumé.txt\n@@\n-old line\n+new line ✨\n"
    "*** End Patch\n"
)


def _events(raw: bytes) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return decoder.feed(raw) + decoder.flush()


def _replay(raw: bytes, cuts: Sequence[int] = ()) -> tuple[list[EventKind], ResponseSummary]:
    return replay(RESPONSES, raw, cuts)


_canon = canon


# --- streamed tool calls -------------------------------------------------------------

def _only(raw: bytes, *names: str) -> list[tuple[str, str]]:
    return [(e, d) for e, d in _events(raw) if e in names]


@pytest.mark.parametrize("with_item_id", [True, False])
def test_deltas_alone_reconstruct_arguments_and_custom_input(with_item_id: bool) -> None:
    observer = RESPONSES.stream_observer()
    for event, data in _only(
        STREAM_TOOLS,
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    ):
        obj = json.loads(data)
        if not with_item_id:
            obj.pop("item_id", None)
            if "item" in obj:
                obj["item"].pop("id", None)
        observer.feed(event, json.dumps(obj))
    assert observer.summary().tool_calls == []  # no call is known to be whole yet
    observer.feed("response.completed", json.dumps({"response": {"output": [], "usage": None}}))
    assert observer.summary() == ResponseSummary(
        tool_calls=[
            ToolCall("call_Rk3mV8pQ1x", "read_file", ARGS_READ),
            ToolCall("call_Wn2bT6yH4c", "apply_patch", PATCH),
        ],
        usage=None,
        terminal_seen=True,
    )


def test_done_events_are_authoritative_over_deltas() -> None:
    observer = RESPONSES.stream_observer()
    item = {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}
    observer.feed("response.output_item.added", json.dumps({"output_index": 0, "item": item}))
    observer.feed(
        "response.function_call_arguments.delta",
        json.dumps({"item_id": "fc_1", "output_index": 0, "delta": '{"a": 1'}),
    )
    observer.feed(
        "response.function_call_arguments.done",
        json.dumps({"item_id": "fc_1", "output_index": 0, "arguments": '{"a": 1}'}),
    )
    assert observer.summary().tool_calls == [ToolCall("c1", "f", '{"a": 1}')]
    done = {**item, "arguments": '{"a": 2}', "status": "completed"}
    observer.feed("response.output_item.done", json.dumps({"output_index": 0, "item": done}))
    assert observer.summary().tool_calls == [ToolCall("c1", "f", '{"a": 2}')]


def test_events_without_event_field_are_classified_by_data_type() -> None:
    stripped = b"".join(f"data: {data}\n\n".encode() for _, data in _events(STREAM_TOOLS))
    kinds_named, named = _replay(STREAM_TOOLS)
    kinds_bare, bare = _replay(stripped)
    assert kinds_bare == kinds_named
    assert bare == named


# --- classification ----------------------------------------------------------------


def test_text_stream_classification_in_order() -> None:
    kinds, summary = _replay(STREAM_TEXT)
    # created, in_progress, item added, part added, 8 text deltas, text done, part done,
    # item done, completed
    assert kinds == [D, D, D, D] + [C] * 8 + [D, D, D, T]
    assert summary == ResponseSummary(tool_calls=[], usage=Usage(5600, 14, cache_read_input_tokens=5120),
                                      terminal_seen=True)


def test_tool_stream_classification_in_order() -> None:
    kinds, _ = _replay(STREAM_TOOLS)
    expected = []
    for name, _ in _events(STREAM_TOOLS):
        if name.endswith(".delta"):
            expected.append(C)
        elif name == "response.completed":
            expected.append(T)
        else:
            expected.append(D)  # item starts are data, even for tool calls
    assert kinds == expected
    assert kinds.count(C) == 3 + 15 + 18  # summary, argument and custom input deltas


@pytest.mark.parametrize(
    ("event", "data", "kind"),
    [
        ("keepalive", '{"type":"keepalive","sequence_number":466}', H),
        ("", '{"type":"keepalive","sequence_number":466}', H),
        ("response.reasoning_text.delta", '{"delta":"hm"}', C),
        ("response.refusal.delta", '{"delta":"no"}', C),
        ("response.incomplete", '{"type":"response.incomplete","response":{"usage":null}}', T),
        ("response.failed", '{"type":"response.failed","response":{"status":"failed"}}', T),
        ("response.failed", "not json", T),
        ("error", '{"type":"error","code":"server_error","message":"boom"}', T),
        ("response.created", '{"type":"response.created","response":5}', D),
        ("response.output_item.added", '{"item":{"type":"function_call"}}', D),
        ("response.output_item.added", '{"item":"function_call"}', D),
        ("response.output_item.done", '{"item":{"type":"function_call"}', D),
        ("response.function_call_arguments.delta", "[1,2]", C),
        ("", "garbage", D),
        ("", "[DONE]", D),
    ],
)
def test_event_classification(event: str, data: str, kind: EventKind) -> None:
    assert RESPONSES.stream_observer().feed(event, data) is kind


def test_failed_and_incomplete_are_terminal_with_usage() -> None:
    for name in ("response.incomplete", "response.failed"):
        observer = RESPONSES.stream_observer()
        usage = {"input_tokens": 9, "output_tokens": 4}
        observer.feed(name, json.dumps({"type": name, "response": {"usage": usage}}))
        assert observer.summary() == ResponseSummary([], Usage(9, 4), True)


# --- request parsing -----------------------------------------------------------------


def test_request_reads_trailing_calls_and_outputs_only() -> None:
    view = RESPONSES.parse_request(REQUEST_TOOLS)
    assert (view.model, view.stream) == ("gpt-5-codex", True)
    assert view.tool_calls == [
        ToolCall("call_new_a", "read_file", '{"path":"notes/résumé.txt"}'),
        ToolCall("call_new_b", "apply_patch", "*** Begin Patch\n*** End Patch\n"),
    ]
    assert view.tool_results == [
        ToolResult("call_new_a", "old line"),
        ToolResult("call_new_b", "Success.\nUpdated 1 file"),
    ]


def test_conversation_seed_is_instructions_and_first_user_message() -> None:
    assert RESPONSES.parse_request(REQUEST_TOOLS).conversation_seed == (
        "You are Codex, a coding agent.\n"
        "<environment_context>\n  <cwd>/home/dev/project</cwd>\n</environment_context>"
    )
    assert RESPONSES.parse_request({"instructions": "I", "input": "hello"}).conversation_seed == (
        "I\nhello"
    )


def _call(i: int) -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"}


def _output(i: int) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": f"c{i}", "output": f"r{i}"}


def test_agents_sdk_history_of_sequential_turns_yields_the_last_pair() -> None:
    items: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    for i in range(100):
        items += [_call(i), _output(i)]
    view = RESPONSES.parse_request({"input": items})
    assert view.tool_calls == [ToolCall("c99", "f", "{}")]
    assert view.tool_results == [ToolResult("c99", "r99")]


def test_user_message_after_outputs_is_skipped() -> None:
    items = [_call(1), _call(2), _output(1), _output(2), {"role": "user", "content": "go on"}]
    view = RESPONSES.parse_request({"input": items})
    assert [c.call_id for c in view.tool_calls] == ["c1", "c2"]
    assert [r.call_id for r in view.tool_results] == ["c1", "c2"]


def test_trailing_assistant_text_turn_has_no_results() -> None:
    items = [
        _call(1),
        _output(1),
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
    ]
    view = RESPONSES.parse_request({"input": items})
    assert (view.tool_calls, view.tool_results) == ([], [])


def test_previous_response_id_request_has_outputs_without_calls() -> None:
    view = RESPONSES.parse_request({"previous_response_id": "resp_1", "input": [_output(3)]})
    assert (view.tool_calls, view.tool_results) == ([], [ToolResult("c3", "r3")])


class _Untouchable(dict):  # type: ignore[type-arg]
    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parse_request read the old history")

    __getitem__ = get


def test_request_parsing_never_reads_old_history() -> None:
    items = REQUEST_TOOLS["input"]
    old = [_Untouchable(_output(i)) for i in range(500)]
    # items[5] is the newest old output: the walk must read it to find the boundary.
    body = {**REQUEST_TOOLS, "input": [*items[:3], *old, *items[5:]]}
    view = RESPONSES.parse_request(body)
    assert [r.call_id for r in view.tool_results] == ["call_new_a", "call_new_b"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"input": None, "instructions": 5},
        {"input": [None, 3, "x", {"type": 7}, {"type": "function_call_output"}]},
        {
            "input": [
                {"type": "function_call", "arguments": None},
                {"type": "function_call_output", "output": {"a": 1}},
            ]
        },
    ],
)
def test_odd_request_shapes_never_raise(body: dict[str, Any]) -> None:
    RESPONSES.parse_request(body)


def test_non_text_output_is_flattened_to_canonical_json() -> None:
    items = [
        _call(1),
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_image", "image_url": "u", "detail": "auto"}],
        },
    ]
    view = RESPONSES.parse_request({"input": items})
    assert view.tool_results[0].output == '{"detail":"auto","image_url":"u","type":"input_image"}'


# --- non-streamed responses ----------------------------------------------------------


def test_non_streamed_response() -> None:
    summary = RESPONSES.parse_response(RESPONSE_TOOLS)
    assert summary.tool_calls == [
        ToolCall("call_Rk3mV8pQ1x", "read_file", ARGS_READ),
        ToolCall("call_Wn2bT6yH4c", "apply_patch", PATCH),
    ]
    assert summary.usage == Usage(5210, 347, cache_read_input_tokens=4864)
    assert summary.terminal_seen


@pytest.mark.parametrize("body", [{}, {"output": "x"}, {"output": [1, None]}, {"usage": 3}])
def test_odd_response_shapes_never_raise(body: dict[str, Any]) -> None:
    assert RESPONSES.parse_response(body).tool_calls == []


# --- errors and notices --------------------------------------------------------------


def test_error_body_shape() -> None:
    assert RESPONSES.error_body("m", "t", None) == {
        "error": {"message": "m", "type": "t", "code": None, "param": None}
    }


def test_stream_error_is_a_response_failed_event() -> None:
    raw = RESPONSES.stream_error("stream stalled", "upstream_error", "stream_stalled")
    [(event, data)] = _events(raw)
    body = json.loads(data)
    assert event == "response.failed"
    assert body["type"] == "response.failed"
    assert body["sequence_number"] == 0
    assert body["response"]["status"] == "failed"
    assert body["response"]["object"] == "response"
    assert body["response"]["error"] == {"code": "stream_stalled", "message": "stream stalled"}
    assert RESPONSES.stream_observer().feed(event, data) is T


def _sdk_client(body: bytes) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return openai.OpenAI(
        api_key="test",
        base_url="http://upstream.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )


def _cut_after_deltas(raw: bytes) -> tuple[bytes, Any]:
    """Upstream bytes up to the last text delta, and the observer that saw them."""
    cut = raw.rfind(b"event: response.output_text.done")
    observer = RESPONSES.stream_observer()
    for event, data in _events(raw[:cut]):
        observer.feed(event, data)
    return raw[:cut], observer


def test_openai_sdk_surfaces_stateless_stream_error_as_failed_response() -> None:
    raw = RESPONSES.stream_error("stream stalled", "upstream_error", "stream_stalled")
    events = list(_sdk_client(raw).responses.create(model="m", input="x", stream=True))
    assert [e.type for e in events] == ["response.failed"]
    assert events[0].response.status == "failed"
    assert events[0].response.error.code == "stream_stalled"
    assert events[0].response.error.message == "stream stalled"


def test_stream_error_with_observer_continues_the_upstream_response() -> None:
    upstream, observer = _cut_after_deltas(STREAM_TEXT)
    raw = RESPONSES.stream_error("stalled", "upstream_error", "stream_stalled", observer=observer)
    [(event, data)] = _events(raw)
    body = json.loads(data)
    last_seq = json.loads(_events(upstream)[-1][1])["sequence_number"]
    assert body["sequence_number"] == last_seq + 1
    assert body["response"]["id"] == "resp_68a1c0ffee5b8190a3"
    assert body["response"]["model"] == "gpt-5-codex"
    # The SDK's stream helper checks lifecycle identity; it must accept the failure.
    with _sdk_client(upstream + raw).responses.stream(model="m", input="x") as stream:
        events = list(stream)
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.code == "stream_stalled"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        "Done — the résumé is updated 🎉."
    )


def test_stream_error_before_any_upstream_event_starts_the_response() -> None:
    observer = RESPONSES.stream_observer()
    raw = RESPONSES.stream_error(
        "no first byte", "upstream_error", "stream_stalled", observer=observer
    )
    assert [e for e, _ in _events(raw)] == ["response.created", "response.failed"]
    with _sdk_client(raw).responses.stream(model="m", input="x") as stream:
        events = list(stream)
    assert [e.type for e in events] == ["response.created", "response.failed"]
    assert [e.sequence_number for e in events] == [0, 1]


def test_inject_notice_appends_a_developer_message_and_changes_nothing_else() -> None:
    original = copy.deepcopy(REQUEST_TOOLS)
    injected = RESPONSES.inject_notice(REQUEST_TOOLS, "Stop.")
    assert REQUEST_TOOLS == original
    assert injected["input"] == [
        *original["input"],
        {"type": "message", "role": "developer", "content": "Stop."},
    ]
    assert {k: v for k, v in injected.items() if k != "input"} == {
        k: v for k, v in original.items() if k != "input"
    }


def test_inject_notice_converts_string_input() -> None:
    assert RESPONSES.inject_notice({"input": "hi", "model": "m"}, "Stop.") == {
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "message", "role": "developer", "content": "Stop."},
        ],
    }


@pytest.mark.parametrize(
    "path", ["/v1/responses", "/v1/responses/resp_123", "/v1/responses/resp_1/input_items"]
)
def test_responses_paths_route_to_responses(path: str) -> None:
    assert format_for_path(path) is RESPONSES


def test_upstream_error_event_is_terminal() -> None:
    from app.wire import RESPONSES

    observer = RESPONSES.stream_observer()
    kind = observer.feed("error", '{"type": "error", "code": "server_error", "message": "boom", "sequence_number": 3}')
    assert kind.name == "TERMINAL" and observer.summary().terminal_seen


# --- upstream errors and unfinished calls (issue 10 items 1 and 5) --------------------

def test_error_then_response_failed_keeps_only_finished_calls() -> None:
    observer = RESPONSES.stream_observer()
    for index, call_id in enumerate(["call_a", "call_b"]):
        item = {"id": f"fc_{index}", "type": "function_call", "status": "in_progress", "call_id": call_id,
                "name": "read_file", "arguments": ""}
        observer.feed("response.output_item.added", json.dumps({"output_index": index, "item": item}))
        observer.feed("response.function_call_arguments.delta",
                      json.dumps({"item_id": f"fc_{index}", "output_index": index, "delta": '{"path": "x"}'}))
        if index == 0:
            observer.feed("response.output_item.done", json.dumps(
                {"output_index": 0, "item": {**item, "status": "completed", "arguments": '{"path": "x"}'}}))
    assert observer.feed("error", json.dumps({"type": "error", "code": "server_error"})) is EventKind.TERMINAL
    failed = {"type": "response.failed", "response": {"status": "failed", "output": [], "usage": None,
                                                      "error": {"code": "server_error", "message": "x"}}}
    assert observer.feed("response.failed", json.dumps(failed)) is EventKind.TERMINAL
    summary = observer.summary()
    assert summary.terminal_seen and [c.call_id for c in summary.tool_calls] == ["call_a"]


def test_cached_tokens_are_part_of_input_tokens() -> None:
    usage = {"input_tokens": 4210, "input_tokens_details": {"cached_tokens": 3968}, "output_tokens": 188,
             "output_tokens_details": {"reasoning_tokens": 128}}
    assert RESPONSES.parse_response({"usage": usage}).usage == Usage(4210, 188, cache_read_input_tokens=3968)
