"""Agent and upstream JSON where a string is expected may hold a list or an object:
the readers that look a ``type`` up in a set must treat it as an unknown type, not raise
(``TypeError: unhashable type``, which the gateway answered as 500 before; found by
tests/test_fuzz_proxy.py's hypothesis run)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.guard.text_turns import tail
from app.wire._common import flatten_output
from app.wire.responses import FORMAT as RESPONSES

ODD_TYPES: list[Any] = [["tool_use"], {"text": 1}, ["text", "tool_result"]]


@pytest.mark.parametrize("odd", ODD_TYPES)
def test_a_content_part_whose_type_is_not_a_string_is_an_unknown_part(odd: Any) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": odd, "text": "hi"}, {"type": "text", "text": "ok"}]}]}
    turns = tail(body)
    assert [t.text for t in turns] == ["ok"] and not turns[0].structured
    assert flatten_output([{"type": odd, "text": "hi"}]).startswith("{")  # an unknown part: its JSON


@pytest.mark.parametrize("odd", ODD_TYPES)
def test_an_output_item_whose_type_is_not_a_string_is_not_a_tool_call(odd: Any) -> None:
    summary = RESPONSES.parse_response({"output": [{"type": odd, "call_id": "c", "name": "n", "arguments": "{}"}]})
    assert summary.tool_calls == []
    observer = RESPONSES.stream_observer()
    item = json.dumps({"type": odd, "call_id": "c", "name": "n", "arguments": "{}"})
    for event in ("response.output_item.added", "response.output_item.done"):
        observer.feed(event, f'{{"type": "{event}", "output_index": 0, "item": {item}}}')
    completed = {"type": "response.completed", "response": {"output": [json.loads(item)]}}
    observer.feed("response.completed", json.dumps(completed))
    assert observer.summary().tool_calls == []
