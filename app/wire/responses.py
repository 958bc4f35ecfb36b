"""OpenAI Responses API wire format (``/v1/responses``).

Shapes follow the OpenAI API reference, "Responses" and "Streaming events":

- request: ``instructions`` and ``input`` (a string, or a list of items). Tool
  calls in the history are ``{"type": "function_call", "call_id", "name",
  "arguments"}`` (``arguments`` is JSON text) and ``{"type": "custom_tool_call",
  "call_id", "name", "input"}``; results are ``{"type": "function_call_output" |
  "custom_tool_call_output", "call_id", "output"}`` (string or list of content
  parts). A Codex / Agents SDK history ends with the last model turn's items
  (reasoning, message, calls) followed by the outputs of those calls.
- response: ``output[]`` items of type ``function_call`` / ``custom_tool_call``;
  ``usage.input_tokens`` / ``usage.output_tokens``.
- stream: every event has ``event: <type>`` and ``data: {"type": <type>,
  "sequence_number", ...}``. Tool calls: ``response.output_item.added`` (item with
  ``call_id`` and ``name``), ``response.function_call_arguments.delta`` / ``.done``
  and ``response.custom_tool_call_input.delta`` / ``.done`` (keyed by ``item_id``
  and ``output_index``), ``response.output_item.done`` (the full item). The stream
  ends with ``response.completed``, ``response.incomplete`` or ``response.failed``
  (usage in ``response.usage``). ``keepalive`` events are heartbeats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.wire._common import (
    as_str,
    flatten_output,
    join_seed,
    loads,
    openai_end_type,
    openai_error_body,
    openai_usage,
    request_view,
    sse_event,
)
from app.wire.base import EndKind, EventKind, ProviderKind, RequestView, ResponseSummary, ToolCall, ToolResult, Usage

_CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_HEARTBEAT = frozenset({"keepalive", "response.keepalive", "ping"})
_ARGS_DELTA = "response.function_call_arguments.delta"
_INPUT_DELTA = "response.custom_tool_call_input.delta"
_ARGS_DONE = "response.function_call_arguments.done"
_INPUT_DONE = "response.custom_tool_call_input.done"
_ITEM_ADDED = "response.output_item.added"
_ITEM_DONE = "response.output_item.done"
_CREATED = "response.created"
_COMPLETED = "response.completed"

# Item kinds in a request ``input`` list, for the backward walk.
_OUTPUT, _CALL, _MODEL, _OTHER = range(4)


def _kind(item: Any) -> int:
    if not isinstance(item, dict):
        return _OTHER
    type_ = item.get("type")
    if isinstance(type_, str):
        if type_.endswith("_call_output"):
            return _OUTPUT
        if type_ in _CALL_TYPES:
            return _CALL
        if type_ == "reasoning" or type_.endswith("_call"):
            return _MODEL
        if type_ != "message":
            return _OTHER
    return _MODEL if item.get("role") == "assistant" else _OTHER


def _call_arguments(item: dict[str, Any]) -> Any:
    value = item.get("input") if item.get("type") == "custom_tool_call" else item.get("arguments")
    return value if value is not None else ""


def _tool_call(item: dict[str, Any]) -> ToolCall:
    return ToolCall(
        call_id=as_str(item.get("call_id")),
        name=as_str(item.get("name")),
        arguments=_call_arguments(item),
    )


def _usage(raw: Any) -> Usage | None:
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
            if not isinstance(item, dict) or item.get("type") not in _CALL_TYPES:
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
        elif name == _CREATED:
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
        value = _call_arguments(item)
        if not isinstance(value, str):
            return
        if final:
            partial.final = value
        elif value and not partial.parts:
            partial.parts.append(value)

    def _final_response(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        usage = _usage(response.get("usage"))
        if usage is not None:
            self._usage = usage
        output = response.get("output")
        if isinstance(output, list):
            for index, item in enumerate(output):
                if isinstance(item, dict) and item.get("type") in _CALL_TYPES:
                    self._item(item, index, final=True)


class ResponsesFormat:
    """:class:`app.wire.base.WireFormat` for the OpenAI Responses API."""

    name = "responses"
    provider_kind: ProviderKind = "openai"

    def refusal(self, status: int, type: str) -> tuple[int, str]:
        """The gateway's own status and OpenAI type, unchanged."""
        return status, type

    def stream_end_type(self, kind: EndKind) -> str:
        """``upstream_stalled``, ``task_stopped`` (repeated output), else
        ``upstream_error`` (``response.failed`` carries no type; kept for the outcome)."""
        return openai_end_type(kind)

    def needs_stream_usage(self, path: str, body: Mapping[str, Any]) -> bool:
        """Never: ``response.completed`` always carries ``response.usage``."""
        return False

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` unchanged (a copy): nothing to ask for."""
        return dict(body)

    def is_usage_only(self, event: str, data: str) -> bool:
        """Never: no event carries only usage."""
        return False

    def parse_request(self, body: dict[str, Any]) -> RequestView:
        """Read ``model``, ``stream``, the seed (``instructions`` + the first user
        message) and the trailing segment of ``input``.

        Walking backward: ``*_call_output`` items are collected (user / developer
        messages and unknown items between them are skipped) until the first model
        item (call, assistant message, reasoning); then ``function_call`` /
        ``custom_tool_call`` items are collected, skipping reasoning and assistant
        messages, until anything else (an older output, a user message).
        """
        view = request_view(body)
        if not isinstance(body, dict):
            return view
        items = body.get("input")
        instructions = as_str(body.get("instructions"))
        if isinstance(items, str):
            view.conversation_seed = join_seed(instructions, items)
            return view
        if not isinstance(items, list):
            view.conversation_seed = instructions
            return view
        view.conversation_seed = join_seed(instructions, _first_user_text(items))
        i = len(items) - 1
        results: list[ToolResult] = []
        while i >= 0:
            item = items[i]
            kind = _kind(item)
            if kind == _OUTPUT:
                results.append(
                    ToolResult(
                        call_id=as_str(item.get("call_id")),
                        output=flatten_output(item.get("output")),
                    )
                )
            elif kind != _OTHER:
                break
            i -= 1
        view.continued = i >= 0 or bool(body.get("previous_response_id"))
        calls: list[ToolCall] = []
        while i >= 0:
            item = items[i]
            kind = _kind(item)
            if kind == _CALL:
                calls.append(_tool_call(item))
            elif kind != _MODEL:
                break
            i -= 1
        results.reverse()
        calls.reverse()
        view.tool_results = results
        view.tool_calls = calls
        return view

    def parse_response(self, body: dict[str, Any]) -> ResponseSummary:
        """Read ``output[]`` tool call items and ``usage``."""
        summary = ResponseSummary(terminal_seen=True)
        if not isinstance(body, dict):
            return summary
        output = body.get("output")
        if isinstance(output, list):
            summary.tool_calls = [
                _tool_call(item)
                for item in output
                if isinstance(item, dict) and item.get("type") in _CALL_TYPES
            ]
        summary.usage = _usage(body.get("usage"))
        return summary

    def text_delta(self, event: str, data: str) -> str:
        """``delta`` of a ``response.output_text.delta`` event."""
        if event and event != "response.output_text.delta":
            return ""
        obj = loads(data)
        if not isinstance(obj, dict) or obj.get("type", event) != "response.output_text.delta":
            return ""
        return as_str(obj.get("delta"))

    def response_text(self, body: dict[str, Any]) -> str:
        """The ``output_text`` parts of the ``message`` items of ``output[]``."""
        output = body.get("output") if isinstance(body, dict) else None
        out = []
        for item in output if isinstance(output, list) else []:
            if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
                out += [as_str(p.get("text")) for p in item["content"]
                        if isinstance(p, dict) and p.get("type") == "output_text"]
        return "".join(out)

    def stream_observer(self) -> ResponsesObserver:
        return ResponsesObserver()

    def error_body(self, message: str, type: str, code: str | None) -> dict[str, Any]:
        """``{"error": {"message", "type", "code", "param": null}}``."""
        return openai_error_body(message, type, code)

    def stream_error(
        self, message: str, type: str, code: str, *, observer: object | None = None
    ) -> bytes:
        """A ``response.failed`` event: ``response.status = "failed"``,
        ``response.error = {"code": code, "message": message}`` (the Responses error
        object has no ``type``; ``type`` is unused).

        Given the stream's :class:`ResponsesObserver`, the event reuses the upstream
        response id and continues its ``sequence_number``; if upstream sent no
        ``response.created`` yet, one is emitted first so SDK stream accumulators
        (which require it) accept the failure. Without an observer: one
        ``response.failed`` with ``sequence_number`` 0.
        """
        seq = 0
        response_id, created_at, model = "resp_taskgate_error", 0, ""
        head = b""
        if isinstance(observer, ResponsesObserver):
            seq = observer.next_sequence_number
            model = observer.model or ""
            if observer.response_id:
                response_id = observer.response_id
                created_at = observer.created_at if observer.created_at is not None else 0
            else:
                created = _response_object(response_id, created_at, model, "in_progress", None)
                head = sse_event(
                    _CREATED, {"type": _CREATED, "sequence_number": seq, "response": created}
                )
                seq += 1
        failed = _response_object(
            response_id, created_at, model, "failed", {"code": code, "message": message}
        )
        return head + sse_event(
            "response.failed",
            {"type": "response.failed", "sequence_number": seq, "response": failed},
        )

    def inject_notice(self, body: dict[str, Any], notice: str) -> dict[str, Any]:
        """Copy of ``body`` with ``{"type": "message", "role": "developer", "content":
        notice}`` appended to ``input`` (a string ``input`` becomes a user message
        first)."""
        new = dict(body)
        items = body.get("input")
        note = {"type": "message", "role": "developer", "content": notice}
        if isinstance(items, list):
            new["input"] = [*items, note]
        elif isinstance(items, str):
            new["input"] = [{"type": "message", "role": "user", "content": items}, note]
        else:
            new["input"] = [note]
        return new


def _response_object(
    response_id: str, created_at: Any, model: str, status: str, error: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": None,
    }


def _first_user_text(items: list[Any]) -> str:
    for item in items:
        if (
            isinstance(item, dict)
            and item.get("role") == "user"
            and item.get("type", "message") == "message"
        ):
            return flatten_output(item.get("content"))
    return ""


FORMAT = ResponsesFormat()
"""The Responses format singleton."""
