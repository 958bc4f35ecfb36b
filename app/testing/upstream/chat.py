"""OpenAI chat completions and legacy completions: bodies and streams."""

from __future__ import annotations

from typing import Any

from .reply import CONTENT, DATA, TERMINAL, Event, Reply, split_text, sse
from .scenarios import REPLY_DEFAULTS


def chat_usage(r: Reply) -> dict[str, int]:
    return {
        "prompt_tokens": r.input_tokens,
        "completion_tokens": r.output_tokens,
        "total_tokens": r.input_tokens + r.output_tokens,
    }


def _chat_tool_calls(r: Reply, tok: str) -> list[dict[str, Any]]:
    return [
        {"id": f"call_{tok}_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for i, c in enumerate(r.calls)
    ]


def chat_body(model: str, r: Reply, tok: str, now: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": r.text or None, "refusal": None}
    if r.calls:
        message["tool_calls"] = _chat_tool_calls(r, tok)
    return {
        "id": f"chatcmpl-{tok}",
        "object": "chat.completion",
        "created": now,
        "model": model,
        "system_fingerprint": "fp_taskgate",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if r.calls else "stop",
            }
        ],
        "usage": chat_usage(r),
    }


def chat_stream(model: str, r: Reply, tok: str, now: int, include_usage: bool) -> list[Event]:
    base = {
        "id": f"chatcmpl-{tok}",
        "object": "chat.completion.chunk",
        "created": now,
        "model": model,
        "system_fingerprint": "fp_taskgate",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        c = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return sse(c)

    events: list[Event] = [(DATA, chunk({"role": "assistant", "content": ""}))]
    events += [(CONTENT, chunk({"content": piece})) for piece in split_text(r.text, r.chunks)]
    for i, c in enumerate(r.calls):
        head = {"index": i, "id": f"call_{tok}_{i}", "type": "function", "function": {"name": c.name, "arguments": ""}}
        events.append((CONTENT, chunk({"tool_calls": [head]})))
        for frag in split_text(c.arguments, r.chunks):
            events.append((CONTENT, chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]})))
    events.append((DATA, chunk({}, "tool_calls" if r.calls else "stop")))
    if include_usage:
        events.append((DATA, sse({**base, "choices": [], "usage": chat_usage(r)})))
    events.append((TERMINAL, b"data: [DONE]\n\n"))
    return events





def _completion_text(r: Reply) -> str:
    return r.text or REPLY_DEFAULTS["text"]


def completions_body(model: str, r: Reply, tok: str, now: int) -> dict[str, Any]:
    return {
        "id": f"cmpl-{tok}",
        "object": "text_completion",
        "created": now,
        "model": model,
        "choices": [{"index": 0, "text": _completion_text(r), "logprobs": None, "finish_reason": "stop"}],
        "usage": chat_usage(r),
    }


def completions_stream(model: str, r: Reply, tok: str, now: int, include_usage: bool) -> list[Event]:
    base = {"id": f"cmpl-{tok}", "object": "text_completion", "created": now, "model": model}

    def chunk(text: str, finish: str | None = None) -> bytes:
        c = {**base, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return sse(c)

    events: list[Event] = [(CONTENT, chunk(p)) for p in split_text(_completion_text(r), r.chunks)]
    events.append((DATA, chunk("", "stop")))
    if include_usage:
        events.append((DATA, sse({**base, "choices": [], "usage": chat_usage(r)})))
    events.append((TERMINAL, b"data: [DONE]\n\n"))
    return events

