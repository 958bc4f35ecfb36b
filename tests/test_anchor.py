"""The conversation-anchored input bound (app/admission/anchor.py) and the output bound
with an operator default (app/admission/charge.py): pure."""

from __future__ import annotations

import copy
import json

from app.admission.anchor import anchor_after, anchored_tokens, history_of
from app.admission.charge import charge_for
from app.admission.cost import MEDIA_PART_TOKENS, REQUEST_OVERHEAD_TOKENS, input_token_bound
from app.config.prices import default_price
from app.config.routing import Route
from app.config.schema import Provider
from tests.task_values import task_value

SYSTEM = "You are a coding agent. " * 40


def _turn1() -> dict:
    """A 200 KB history (as an agent's tool results make it)."""
    return {"model": "gpt-4.1-mini", "max_tokens": 4096, "stream": True,
            "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": "fix the bug"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "call_1", "type": "function",
                              "function": {"name": "read_file", "arguments": "{\"path\": \"a.py\"}"}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "x = 1\n" * 33_000}]}


def _turn2(turn1: dict) -> dict:
    body = copy.deepcopy(turn1)
    body["messages"] += [{"role": "assistant", "content": "I see it."},
                         {"role": "user", "content": "y" * 1000}]
    return body


def _bound(body: dict, anchor) -> int | None:
    return anchored_tokens(history_of(body), anchor, REQUEST_OVERHEAD_TOKENS, MEDIA_PART_TOKENS)


def test_a_growing_conversation_is_bounded_by_the_reported_tokens_plus_what_was_added() -> None:
    turn1 = _turn1()
    assert len(json.dumps(turn1)) > 190_000
    anchor = anchor_after(history_of(turn1), 50_000)
    turn2 = _turn2(turn1)
    bound = _bound(turn2, anchor)
    assert bound is not None and 51_000 < bound < 53_200  # ~50,000 + 1 KB + the overhead
    assert input_token_bound(json.dumps(turn2).encode()) > 200_000  # the byte bound it replaces
    turn2["max_tokens"], turn2["stream"] = 8192, False  # not tokenised: still anchored
    assert _bound(turn2, anchor) == bound


def test_moved_cache_control_markers_do_not_break_the_anchor() -> None:
    turn1 = _turn1()
    turn1["messages"][1]["content"] = [{"type": "text", "text": "fix the bug", "cache_control": {"type": "ephemeral"}}]
    anchor = anchor_after(history_of(turn1), 50_000)
    turn2 = _turn2(turn1)
    turn2["messages"][1]["content"] = [{"type": "text", "text": "fix the bug"}]
    turn2["messages"][-1]["cache_control"] = {"type": "ephemeral"}
    assert _bound(turn2, anchor) is not None


def test_anything_but_an_extension_falls_back_to_the_byte_bound() -> None:
    turn1 = _turn1()
    anchor = anchor_after(history_of(turn1), 50_000)
    edited = _turn2(turn1)
    edited["messages"][3]["content"] = "x = 2\n" * 33_000  # an earlier tool result rewritten
    compacted = _turn2(turn1)
    del compacted["messages"][2:4]
    other_model = {**_turn2(turn1), "model": "gpt-4.1"}
    other_tools = {**_turn2(turn1), "tools": []}
    truncating = {**_turn2(turn1), "truncation": "auto"}
    for body in (edited, compacted, other_model, other_tools):
        assert _bound(body, anchor) is None
    assert history_of(truncating) is None
    assert history_of({"model": "gpt-5", "input": "a string"}) is None
    assert history_of({"model": "gpt-5", "input": [], "previous_response_id": "resp_1"}) is None
    assert _bound(_turn2(turn1), None) is None  # the conversation's first request


def test_media_added_since_the_anchor_is_reserved_per_part() -> None:
    turn1 = _turn1()
    anchor = anchor_after(history_of(turn1), 50_000)
    turn2 = _turn2(turn1)
    plain = _bound(turn2, anchor)
    turn2["messages"][-1] = {"role": "user", "content": [{"type": "text", "text": "y" * 1000},
                                                         {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}
    assert _bound(turn2, anchor) > plain + MEDIA_PART_TOKENS - 100


def _route(**extra: object) -> Route:
    provider = Provider(kind="openai", base_url="http://127.0.0.1:9/v1")
    return Route("main", provider, "gpt-4.1-mini", "gpt-4.1-mini", default_price("gpt-4.1-mini"), 32_768, **extra)


def test_the_charge_reserves_the_smaller_bound_and_the_output_default_it_adds() -> None:
    turn1 = _turn1()
    anchor = anchor_after(history_of(turn1), 50_000)
    turn2 = _turn2(turn1)
    body = json.dumps(turn2).encode()
    charge = charge_for(_route(), body, turn2, path="/v1/chat/completions")
    assert charge.input_bound(None) == input_token_bound(body)
    assert charge.input_bound(anchor) == _bound(turn2, anchor)
    ceiling = task_value(cost_limit_usd=5)
    unbounded = {k: v for k, v in turn2.items() if k != "max_tokens"}
    no_max = charge_for(_route(default_max_output_tokens=2000), body, unbounded, path="/v1/chat/completions")
    assert no_max.added_output_max(ceiling) == ("max_completion_tokens", 2000)
    assert no_max.added_output_max(task_value(cost_limit_usd=5, default_max_output_tokens=700)) == (
        "max_completion_tokens", 700)  # the task's default wins over the model's
    assert no_max.added_output_max(task_value()) is None  # no ceiling: the body stays as sent
    assert charge.added_output_max(ceiling) is None  # the request's own max_tokens
    responses = charge_for(_route(default_max_output_tokens=2000), b"{}", {"input": []}, path="/v1/responses")
    assert responses.added_output_max(ceiling) == ("max_output_tokens", 2000)
    n3 = charge_for(_route(), body, {**unbounded, "n": 3}, path="/v1/chat/completions")
    assert n3._output_bound(ceiling) == 3 * 32_768  # the model's ceiling per choice
