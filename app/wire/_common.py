"""Small helpers shared by the wire format modules. Pure, never raise."""

from __future__ import annotations

import json
from typing import Any

from app.wire import json_text
from app.wire.base import EndKind, RequestView, Usage

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def loads(data: str | bytes) -> Any:
    """JSON text parsed (:func:`app.wire.json_text.loads`), ``None`` when it is not
    JSON. Never raises."""
    try:
        return json_text.loads(data)
    except (ValueError, TypeError, RecursionError):
        return None


def loads_text(data: str | bytes) -> Any:
    """JSON text parsed for its strings (:func:`app.wire.json_text.loads_for_strings`:
    an integer beyond 64 bits may be a ``float``), ``None`` when it is not JSON. For the
    answer text of stream events (``text_delta``). Never raises."""
    try:
        return json_text.loads_for_strings(data)
    except (ValueError, TypeError, RecursionError):
        return None


def request_view(body: Any) -> RequestView:
    """A :class:`RequestView` with ``model`` and ``stream`` read from ``body`` (the
    fields every format shares); empty when ``body`` is not an object."""
    view = RequestView()
    if isinstance(body, dict):
        model = body.get("model")
        view.model = model if isinstance(model, str) else None
        view.stream = body.get("stream") is True
    return view


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys (how non-text parts are flattened)."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def flatten_output(content: Any) -> str:
    """Flatten tool result or message content to text.

    A string is returned as is; ``None`` as ``""``; a list of content parts is
    joined by ``"\\n"``: the ``text`` of text parts (type ``text``, ``input_text``,
    ``output_text`` or no type), bare strings as is, any other part as its
    canonical JSON. Any other value is its canonical JSON.
    """
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif (
                isinstance(part, dict)
                and isinstance(part.get("text"), str)
                and as_str(part.get("type", "text")) in _TEXT_PART_TYPES
            ):
                pieces.append(part["text"])
            else:
                pieces.append(canonical_json(part))
        return "\n".join(pieces)
    return canonical_json(content)


def as_int(value: Any) -> int:
    """A token count: ``value`` when it is a non-negative int, else 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def openai_usage(raw: Any, input_key: str, output_key: str, details_key: str) -> Usage | None:
    """An OpenAI ``usage`` object (chat: ``prompt_tokens`` / ``completion_tokens`` /
    ``prompt_tokens_details``; Responses: ``input_tokens`` / ``output_tokens`` /
    ``input_tokens_details``) as :class:`Usage`; ``None`` when ``raw`` is not an object.
    ``cached_tokens`` is already part of the input count: it only fills the breakdown."""
    if not isinstance(raw, dict):
        return None
    details = raw.get(details_key)
    return Usage(
        input_tokens=as_int(raw.get(input_key)),
        output_tokens=as_int(raw.get(output_key)),
        cache_read_input_tokens=as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0,
    )


def as_str(value: Any) -> str:
    """``value`` when it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


def join_seed(*parts: str) -> str:
    """Concatenate the non-empty seed parts with ``"\\n"``."""
    return "\n".join(p for p in parts if p)


def openai_error_body(message: str, type: str, code: str | None) -> dict[str, Any]:
    """The OpenAI error body: ``{"error": {"message", "type", "code", "param"}}``."""
    return {"error": {"message": message, "type": type, "code": code, "param": None}}


#: ``error.type`` of the terminal error event the gateway appends to an OpenAI stream
#: (chat completions, Responses) it ended, by end kind; ``upstream_error`` otherwise.
OPENAI_END_TYPES: dict[str, str] = {"stalled": "upstream_stalled", "repeated_output": "task_stopped"}


def openai_end_type(kind: EndKind) -> str:
    """``error.type`` for an OpenAI stream the gateway ended for ``kind`` (see
    :data:`OPENAI_END_TYPES`)."""
    return OPENAI_END_TYPES.get(kind, "upstream_error")


def sse_event(event: str | None, payload: Any) -> bytes:
    """One SSE event as bytes: optional ``event:`` line, one ``data:`` line, blank line."""
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()
