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
- stream: ``event: <type>`` events, read by :class:`ResponsesObserver`
  (:mod:`app.wire.responses_stream`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.wire._common import (
    as_str,
    flatten_output,
    join_seed,
    loads_text,
    openai_end_type,
    openai_error_body,
    request_view,
    sse_event,
)
from app.wire.base import EndKind, ProviderKind, RequestView, ResponseSummary, ToolCall, ToolResult
from app.wire.responses_stream import CALL_TYPES, CREATED, ResponsesObserver, call_arguments, responses_usage

# Item kinds in a request ``input`` list, for the backward walk.
_OUTPUT, _CALL, _MODEL, _OTHER = range(4)


def _kind(item: Any) -> int:
    if not isinstance(item, dict):
        return _OTHER
    type_ = item.get("type")
    if isinstance(type_, str):
        if type_.endswith("_call_output"):
            return _OUTPUT
        if type_ in CALL_TYPES:
            return _CALL
        if type_ == "reasoning" or type_.endswith("_call"):
            return _MODEL
        if type_ != "message":
            return _OTHER
    return _MODEL if item.get("role") == "assistant" else _OTHER


def _tool_call(item: dict[str, Any]) -> ToolCall:
    return ToolCall(
        call_id=as_str(item.get("call_id")),
        name=as_str(item.get("name")),
        arguments=call_arguments(item),
    )


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
                if isinstance(item, dict) and as_str(item.get("type")) in CALL_TYPES
            ]
        summary.usage = responses_usage(body.get("usage"))
        return summary

    def text_delta(self, event: str, data: str) -> str:
        """``delta`` of a ``response.output_text.delta`` event."""
        if event and event != "response.output_text.delta":
            return ""
        obj = loads_text(data)
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
                    CREATED, {"type": CREATED, "sequence_number": seq, "response": created}
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
