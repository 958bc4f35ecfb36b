"""Anthropic Messages: bodies and streams."""

from __future__ import annotations

from typing import Any

from .reply import (
    CONTENT,
    DATA,
    HEARTBEAT,
    TERMINAL,
    Call,
    Event,
    Reply,
    split_text,
    sse,
)


def _messages_usage(r: Reply) -> dict[str, int]:
    return {
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _messages_object(model: str, tok: str, content: list[Any], stop: str | None,
                     usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": f"msg_{tok}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _messages_tool_use(tok: str, i: int, c: Call, with_input: bool) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{tok}_{i}", "name": c.name, "input": c.input() if with_input else {}}


def messages_body(model: str, r: Reply, tok: str, now: int) -> dict[str, Any]:
    content: list[Any] = [{"type": "text", "text": r.text}] if r.text or not r.calls else []
    content += [_messages_tool_use(tok, i, c, True) for i, c in enumerate(r.calls)]
    return _messages_object(model, tok, content, "tool_use" if r.calls else "end_turn", _messages_usage(r))


ANTHROPIC_PING = sse({"type": "ping"}, "ping")


def messages_stream(model: str, r: Reply, tok: str, now: int) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, type_: str, **fields: Any) -> None:
        events.append((kind, sse({"type": type_, **fields}, type_)))

    start_usage = {**_messages_usage(r), "output_tokens": 1}
    emit(DATA, "message_start", message=_messages_object(model, tok, [], None, start_usage))
    index = 0
    if r.text or not r.calls:
        emit(DATA, "content_block_start", index=index, content_block={"type": "text", "text": ""})
        events.append((HEARTBEAT, ANTHROPIC_PING))
        for piece in split_text(r.text, r.chunks):
            emit(CONTENT, "content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        emit(DATA, "content_block_stop", index=index)
        index += 1
    for i, c in enumerate(r.calls):
        emit(DATA, "content_block_start", index=index, content_block=_messages_tool_use(tok, i, c, False))
        if index == 0:
            events.append((HEARTBEAT, ANTHROPIC_PING))
        for frag in split_text(c.arguments, r.chunks):
            delta = {"type": "input_json_delta", "partial_json": frag}
            emit(CONTENT, "content_block_delta", index=index, delta=delta)
        emit(DATA, "content_block_stop", index=index)
        index += 1
    emit(
        DATA,
        "message_delta",
        delta={"stop_reason": "tool_use" if r.calls else "end_turn", "stop_sequence": None},
        usage={"input_tokens": r.input_tokens, "output_tokens": r.output_tokens},
    )
    emit(TERMINAL, "message_stop")
    return events

