"""OpenAI Responses API: bodies and streams (with ``sequence_number``)."""

from __future__ import annotations

from typing import Any

from .reply import CONTENT, DATA, TERMINAL, Call, Event, Reply, split_text, sse


def _responses_usage(r: Reply) -> dict[str, Any]:
    return {
        "input_tokens": r.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": r.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": r.input_tokens + r.output_tokens,
    }


def _responses_object(
    model: str, tok: str, now: int, status: str, output: list[Any], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": f"resp_{tok}",
        "object": "response",
        "created_at": now,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
    }


def _responses_message(tok: str, text: str, status: str) -> dict[str, Any]:
    content = ([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
               if status == "completed" else [])
    return {"type": "message", "id": f"msg_{tok}", "status": status, "role": "assistant", "content": content}


def _responses_call(tok: str, i: int, c: Call, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{tok}_{i}",
        "call_id": f"call_{tok}_{i}",
        "name": c.name,
        "arguments": c.arguments if status == "completed" else "",
        "status": status,
    }


def _responses_output(r: Reply, tok: str) -> list[dict[str, Any]]:
    out = [_responses_message(tok, r.text, "completed")] if r.text or not r.calls else []
    return out + [_responses_call(tok, i, c, "completed") for i, c in enumerate(r.calls)]


def responses_body(model: str, r: Reply, tok: str, now: int) -> dict[str, Any]:
    return _responses_object(model, tok, now, "completed", _responses_output(r, tok), _responses_usage(r))


def responses_stream(model: str, r: Reply, tok: str, now: int) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, type_: str, **fields: Any) -> None:
        events.append((kind, sse({"type": type_, "sequence_number": len(events), **fields}, type_)))

    pending = _responses_object(model, tok, now, "in_progress", [], None)
    emit(DATA, "response.created", response=pending)
    emit(DATA, "response.in_progress", response=pending)
    index = 0
    if r.text or not r.calls:
        item_id = f"msg_{tok}"
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        ids = {"item_id": item_id, "output_index": index, "content_index": 0}
        emit(DATA, "response.output_item.added", output_index=index, item=_responses_message(tok, "", "in_progress"))
        emit(DATA, "response.content_part.added", **ids, part=part)
        for piece in split_text(r.text, r.chunks):
            emit(CONTENT, "response.output_text.delta", **ids, delta=piece, logprobs=[])
        emit(DATA, "response.output_text.done", **ids, text=r.text, logprobs=[])
        emit(DATA, "response.content_part.done", **ids, part={**part, "text": r.text})
        emit(DATA, "response.output_item.done", output_index=index, item=_responses_message(tok, r.text, "completed"))
        index += 1
    for i, c in enumerate(r.calls):
        item_id = f"fc_{tok}_{i}"
        emit(DATA, "response.output_item.added", output_index=index, item=_responses_call(tok, i, c, "in_progress"))
        for frag in split_text(c.arguments, r.chunks):
            emit(CONTENT, "response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=frag)
        emit(
            DATA,
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            name=c.name,
            arguments=c.arguments,
        )
        emit(DATA, "response.output_item.done", output_index=index, item=_responses_call(tok, i, c, "completed"))
        index += 1
    emit(TERMINAL, "response.completed", response=responses_body(model, r, tok, now))
    return events

