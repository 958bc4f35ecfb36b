"""The plain turns at the end of a request's history, whatever its wire format: what the
text action extractor (:mod:`app.guard.text_actions`) and the repeated-answer rule read.

Pure: no I/O. Reads the request body's message list: chat completions and Anthropic
Messages ``messages[]``, Responses ``input[]`` (when it is a list). A turn's text is the
text of its content (a string, or the ``text`` of its ``text`` / ``input_text`` /
``output_text`` parts joined by ``"\\n"``; other parts, e.g. images, are left out).

A turn is *structured* when it carries tool use the wire parsers already read: a chat
message with ``tool_calls`` or ``role: "tool"``, an Anthropic ``tool_use`` /
``tool_result`` block, a Responses ``*_call`` / ``*_call_output`` item. The structured
path owns those (:class:`app.wire.base.RequestView`), the text extractor skips them.

Only the tail is read: from the end back to and including the :data:`TAIL_ASSISTANT_TURNS`
th assistant turn, at most :data:`MAX_TAIL_ITEMS` items; the cost is the last couple of
exchanges, not the history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Assistant turns (counted from the end) the tail reaches back to.
TAIL_ASSISTANT_TURNS = 2
#: Most items read from the end, whatever their roles.
MAX_TAIL_ITEMS = 64

ASSISTANT = "assistant"
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_STRUCTURED_PARTS = frozenset({"tool_use", "tool_result", "server_tool_use", "function_call",
                               "function_call_output"})


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the history: its ``index`` in the body's list, its ``role``
    (``"assistant"``, ``"user"``, ``"tool"``, ``"system"``, ...), its ``text`` and whether
    it is ``structured`` (see the module docstring)."""

    index: int
    role: str
    text: str
    structured: bool = False


def _text_of(content: Any) -> tuple[str, bool]:
    """(text, structured) of one message's content."""
    if isinstance(content, str):
        return content, False
    if not isinstance(content, list):
        return "", False
    pieces: list[str] = []
    structured = False
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            kind = part.get("type", "text")
            if not isinstance(kind, str):  # agent JSON: a list here is unhashable, not a part type
                continue
            if kind in _STRUCTURED_PARTS:
                structured = True
            elif kind in _TEXT_PARTS and isinstance(part.get("text"), str):
                pieces.append(part["text"])
    return "\n".join(pieces), structured


def _turn(index: int, item: Mapping[str, Any]) -> Turn | None:
    kind = item.get("type")
    role = item.get("role")
    if isinstance(kind, str) and kind.endswith("_call_output"):
        return Turn(index, "tool", "", structured=True)
    if isinstance(kind, str) and kind.endswith("_call"):
        return Turn(index, ASSISTANT, "", structured=True)
    if not isinstance(role, str):
        return None
    text, structured = _text_of(item.get("content"))
    structured = structured or role == "tool" or bool(item.get("tool_calls"))
    return Turn(index, role, text, structured)


def _items(body: Mapping[str, Any]) -> Sequence[Any]:
    messages = body.get("messages")
    if isinstance(messages, list):
        return messages
    items = body.get("input")
    return items if isinstance(items, list) else ()


def tail(body: Any) -> list[Turn]:
    """The tail of ``body``'s history, oldest first (see the module docstring); ``[]``
    for a body without a message list. Never raises."""
    if not isinstance(body, Mapping):
        return []
    items = _items(body)
    turns: list[Turn] = []
    assistants = 0
    stop = max(len(items) - MAX_TAIL_ITEMS, 0)
    for index in range(len(items) - 1, stop - 1, -1):
        item = items[index]
        turn = _turn(index, item) if isinstance(item, Mapping) else None
        if turn is None:
            continue
        turns.append(turn)
        if turn.role == ASSISTANT:
            assistants += 1
            if assistants >= TAIL_ASSISTANT_TURNS:
                break
    turns.reverse()
    return turns


def latest_answer_sha256(turns: Sequence[Turn]) -> str | None:
    """SHA-256 hex of the text of the latest assistant turn in ``turns``, ``None`` when
    there is none or it has no text (e.g. tool calls only). What ``repeated_response``
    compares a new answer with (:mod:`app.guard.conversation_rules`)."""
    for turn in reversed(turns):
        if turn.role == ASSISTANT:
            if not turn.text:
                return None
            return hashlib.sha256(turn.text.encode("utf-8", "surrogatepass")).hexdigest()
    return None
