"""OpenAI Responses API streams: the observer of :mod:`app.wire.responses`.

Every event has ``event: <type>`` and ``data: {"type": <type>, "sequence_number",
...}``. Tool calls: ``response.output_item.added`` (item with ``call_id`` and
``name``), ``response.function_call_arguments.delta`` / ``.done`` and
``response.custom_tool_call_input.delta`` / ``.done`` (keyed by ``item_id`` and
``output_index``), ``response.output_item.done`` (the full item). The stream ends
with ``response.completed``, ``response.incomplete`` or ``response.failed`` (usage in
``response.usage``). ``keepalive`` events are heartbeats.
"""

from __future__ import annotations

from typing import Any

from app.wire._common import as_str, loads, openai_usage
from app.wire.base import EventKind, ResponseSummary, ToolCall, Usage

#: Output item types that are tool calls.
CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_HEARTBEAT = frozenset({"keepalive", "response.keepalive", "ping"})
_ARGS_DELTA = "response.function_call_arguments.delta"
_INPUT_DELTA = "response.custom_tool_call_input.delta"
_ARGS_DONE = "response.function_call_arguments.done"
_INPUT_DONE = "response.custom_tool_call_input.done"
_ITEM_ADDED = "response.output_item.added"
_ITEM_DONE = "response.output_item.done"
CREATED = "response.created"
_COMPLETED = "response.completed"


def call_arguments(item: dict[str, Any]) -> Any:
    """A call item's arguments as sent: ``input`` of a custom tool call, else
    ``arguments`` (``""`` when absent)."""
    value = item.get("input") if item.get("type") == "custom_tool_call" else item.get("arguments")
    return value if value is not None else ""


def responses_usage(raw: Any) -> Usage | None:
    """A Responses ``usage`` object (``input_tokens`` / ``output_tokens`` /
    ``input_tokens_details``) as :class:`Usage`; ``None`` when it is not an object."""
    return openai_usage(raw, "input_tokens", "output_tokens", "input_tokens_details")


class _PartialCall:
    __slots__ = ("call_id", "name", "parts", "final", "done")

    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.parts: list[str] = []
        self.final: Any = None  # authoritative text from a ``.done`` event or item
        self.done = False  # its arguments / input are whole (a ``.done`` event or completed item)


class ResponsesObserver:
    """Stream observer for Responses streaming events.

    Classification: ``*.delta`` events (output text, reasoning, refusal, tool call
    arguments, custom tool input) are CONTENT; ``response.completed`` /
    ``.incomplete`` / ``.failed`` are TERMINAL; ``keepalive`` is HEARTBEAT;
    everything else (``response.created``, ``response.output_item.added`` even for
    a tool call, ``*.done``, ``error``, ...) is DATA. The SSE ``event:`` name
    decides; data is parsed only for tool-call events, ``response.created`` and
    terminal events (or when the ``event:`` line is missing).

    Also remembers the upstream response id, ``created_at``, ``model`` and the next
    ``sequence_number``, so :meth:`ResponsesFormat.stream_error` can continue the
    same response.
    """

    __slots__ = (
        "_calls",
        "_by_index",
        "_usage",
        "_terminal",
        "_completed",
        "_count",
        "_seq_anchor",
        "response_id",
        "created_at",
        "model",
    )

    def __init__(self) -> None:
        self._calls: dict[Any, _PartialCall] = {}
        self._by_index: dict[int, Any] = {}
        self._usage: Usage | None = None
        self._terminal = False
        self._completed = False  # response.completed arrived
        self._count = 0
        self._seq_anchor: tuple[int, int] | None = None  # (sequence_number, event count)
        self.response_id: str | None = None
        self.created_at: Any = None
        self.model: str | None = None

    @property
    def next_sequence_number(self) -> int:
        """Best-effort ``sequence_number`` for an event appended after those seen."""
        if self._seq_anchor is None:
            return self._count
        seq, at = self._seq_anchor
        return seq + (self._count - at) + 1

    def feed(self, event: str, data: str) -> EventKind:
        self._count += 1
        obj: Any = None
        name = event
        if not name:
            obj = loads(data)
            name = as_str(obj.get("type")) if isinstance(obj, dict) else ""
        if name.endswith(".delta"):
            if name in (_ARGS_DELTA, _INPUT_DELTA):
                obj = self._parse(obj, data)
                if obj is not None:
                    self._delta(obj)
            return EventKind.CONTENT
        if name == "error":  # upstream's own error event ends the stream
            self._terminal = True
            return EventKind.TERMINAL
        if name in _TERMINAL:
            self._terminal = True
            if name == _COMPLETED:
                self._completed = True
            obj = self._parse(obj, data)
            if obj is not None:
                self._final_response(obj.get("response"))
            return EventKind.TERMINAL
        if name in _HEARTBEAT:
            return EventKind.HEARTBEAT
        if name in (_ITEM_ADDED, _ITEM_DONE):
            if '"function_call"' not in data and '"custom_tool_call"' not in data:
                return EventKind.DATA
            obj = self._parse(obj, data)
            item = obj.get("item") if obj is not None else None
            if not isinstance(item, dict) or as_str(item.get("type")) not in CALL_TYPES:
                return EventKind.DATA
            self._item(item, obj.get("output_index"), final=name == _ITEM_DONE)
            return EventKind.DATA
        if name in (_ARGS_DONE, _INPUT_DONE):
            obj = self._parse(obj, data)
            if obj is not None:
                partial = self._lookup(obj.get("item_id"), obj.get("output_index"))
                value = obj.get("arguments" if name == _ARGS_DONE else "input")
                if isinstance(value, str):
                    partial.final = value
                    partial.done = True
        elif name == CREATED:
            obj = self._parse(obj, data)
            response = obj.get("response") if obj is not None else None
            if isinstance(response, dict):
                self.response_id = as_str(response.get("id")) or None
                self.created_at = response.get("created_at")
                self.model = as_str(response.get("model")) or None
        return EventKind.DATA

    def summary(self) -> ResponseSummary:
        """Tool calls that completed (their arguments' ``.done`` event,
        ``response.output_item.done``, a completed item in the final response, or
        ``response.completed``): a call cut off by an error, a failure or a truncation
        is never run by the agent, so it is left out."""
        calls = [
            ToolCall(
                call_id=p.call_id,
                name=p.name,
                arguments=p.final if p.final is not None else "".join(p.parts),
            )
            for p in self._calls.values()
            if p.done or self._completed
        ]
        return ResponseSummary(tool_calls=calls, usage=self._usage, terminal_seen=self._terminal)

    def _parse(self, obj: Any, data: str) -> dict[str, Any] | None:
        if obj is None:
            obj = loads(data)
        if not isinstance(obj, dict):
            return None
        seq = obj.get("sequence_number")
        if isinstance(seq, int) and not isinstance(seq, bool):
            self._seq_anchor = (seq, self._count)
        return obj

    def _lookup(self, item_id: Any, output_index: Any) -> _PartialCall:
        key: Any = None
        if isinstance(item_id, str) and item_id:
            key = item_id
        index = output_index if isinstance(output_index, int) else None
        if key is None or key not in self._calls:
            known = self._by_index.get(index) if index is not None else None
            if known is not None:
                key = known
            elif key is None:
                key = ("output_index", index)
        partial = self._calls.get(key)
        if partial is None:
            partial = self._calls[key] = _PartialCall()
        if index is not None:
            self._by_index.setdefault(index, key)
        return partial

    def _delta(self, obj: dict[str, Any]) -> None:
        delta = obj.get("delta")
        if isinstance(delta, str) and delta:
            self._lookup(obj.get("item_id"), obj.get("output_index")).parts.append(delta)

    def _item(self, item: dict[str, Any], output_index: Any, final: bool = False) -> None:
        partial = self._lookup(item.get("id"), output_index)
        call_id = as_str(item.get("call_id"))
        name = as_str(item.get("name"))
        if call_id:
            partial.call_id = call_id
        if name:
            partial.name = name
        if final and item.get("status") not in ("in_progress", "incomplete"):
            partial.done = True
        value = call_arguments(item)
        if not isinstance(value, str):
            return
        if final:
            partial.final = value
        elif value and not partial.parts:
            partial.parts.append(value)

    def _final_response(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        usage = responses_usage(response.get("usage"))
        if usage is not None:
            self._usage = usage
        output = response.get("output")
        if isinstance(output, list):
            for index, item in enumerate(output):
                if isinstance(item, dict) and as_str(item.get("type")) in CALL_TYPES:
                    self._item(item, index, final=True)
