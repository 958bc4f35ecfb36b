"""Request parsing cost as a conversation grows (in-process, no HTTP).

For each wire format, a history of 10, 100 and 500 messages is built as an agent
sends it: system prompt, a user message, then assistant tool calls each followed
by its result (about 400 bytes of tool output each), ending with the newest
result. Every request therefore carries the same *new* part (one call, one result)
on top of a growing history. Timed, in microseconds per request:

- ``json_loads_us``: ``json.loads`` of the raw body, which the gateway must do
  once per request: O(history).
- ``parse_us``: ``FORMAT.parse_request(body)``, the gateway's own reading (model,
  seed, trailing tool calls and results): should be O(new messages), i.e. flat.
- ``conversation_key_us``: hashing the conversation seed into the loop guard's key.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any, Callable

SIZES = (10, 100, 500)
_OUTPUT = ("line of tool output from a file the agent read; " * 8)[:400]


def _args(i: int) -> dict[str, Any]:
    return {"path": f"src/module_{i}.py", "start_line": i, "end_line": i + 40}


def chat_history(n: int) -> dict[str, Any]:
    """Chat completions body with ``n`` messages."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent. " * 20},
                                  {"role": "user", "content": "Fix the failing test in src/."}]
    i = 0
    while len(msgs) < n:
        cid = f"call_{i:05d}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": cid, "type": "function", "function": {"name": "read_file", "arguments": json.dumps(_args(i))}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"{i}: {_OUTPUT}"})
        i += 1
    return {"model": "gpt-4.1", "stream": True, "messages": msgs[:n]}


def responses_history(n: int) -> dict[str, Any]:
    """Responses API body with ``n`` input items."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "sandbox: workspace-write"}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Fix the failing test in src/."}]}]
    i = 0
    while len(items) < n:
        cid = f"call_{i:05d}"
        items.append({"type": "function_call", "id": f"fc_{i}", "call_id": cid, "name": "read_file",
                      "arguments": json.dumps(_args(i))})
        items.append({"type": "function_call_output", "call_id": cid, "output": f"{i}: {_OUTPUT}"})
        i += 1
    return {"model": "gpt-5-codex", "instructions": "You are a coding agent. " * 20, "stream": True,
            "input": items[:n]}


def anthropic_history(n: int) -> dict[str, Any]:
    """Anthropic Messages body with ``n`` messages, plus one when ``n`` is even
    (roles alternate from a first user message to a last user tool result)."""
    n += 1 - n % 2
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]}]
    i = 0
    while len(msgs) < n:
        tid = f"toolu_{i:05d}"
        msgs.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": tid, "name": "Read", "input": _args(i)}]})
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": f"{i}: {_OUTPUT}"}]})
        i += 1
    return {"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": True,
            "system": "You are a coding agent. " * 20, "messages": msgs[:n]}


def _time_us(fn: Callable[[], Any], budget_s: float) -> float:
    """Best of 5 rounds of the mean time per call, in microseconds (the least
    disturbed round, as ``timeit`` advises); each round runs about ``budget_s / 5``
    seconds (at least one call)."""
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    loops = max(1, int(budget_s / 5 / one))
    rounds = []
    gc_was_on = gc.isenabled()
    gc.disable()  # as timeit does: a collection is not the parser's cost
    try:
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(loops):
                fn()
            rounds.append((time.perf_counter() - t0) / loops * 1e6)
    finally:
        if gc_was_on:
            gc.enable()
    return min(rounds)


def measure(budget_s: float = 0.1) -> list[dict[str, Any]]:
    """One row per (format, size); ``budget_s`` seconds per timed operation."""
    from app.guard.fingerprint import conversation_key
    from app.wire import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, RESPONSES

    builders = (("chat_completions", CHAT_COMPLETIONS, chat_history),
                ("responses", RESPONSES, responses_history),
                ("anthropic_messages", ANTHROPIC_MESSAGES, anthropic_history))
    rows = []
    for name, fmt, build in builders:
        for n in SIZES:
            raw = json.dumps(build(n)).encode()
            body = json.loads(raw)
            view = fmt.parse_request(body)
            assert view.tool_results, f"{name} history of {n} has no trailing tool result"
            rows.append({
                "format": name, "messages": n, "actual_messages": len(body.get("messages") or body.get("input")),
                "body_kib": len(raw) / 1024,
                "new_results": len(view.tool_results),
                "json_loads_us": _time_us(lambda: json.loads(raw), budget_s),
                "parse_us": _time_us(lambda: fmt.parse_request(body), budget_s),
                "conversation_key_us": _time_us(lambda: conversation_key(None, view.conversation_seed), budget_s),
            })
    return rows
