"""Anthropic Messages wire format (``/v1/messages``).

Shapes follow the Anthropic API reference, "Messages" and "Streaming Messages":

- request: ``system`` (string or list of text blocks) and ``messages[]`` whose
  ``content`` is a string or a list of content blocks. Assistant messages carry
  ``{"type": "tool_use", "id", "name", "input": {...}}`` blocks; the next user
  message answers them with ``{"type": "tool_result", "tool_use_id", "content",
  "is_error"}`` blocks (``content`` a string or a list of blocks).
- response: ``content[]`` ``tool_use`` blocks; ``usage.input_tokens`` (plus
  ``cache_creation_input_tokens`` and ``cache_read_input_tokens``, which also count
  as input), ``usage.output_tokens`` and, with server-side compaction,
  ``usage.iterations`` (one entry per sampling step; see :class:`UsageCounter`).
- stream: ``message_start`` (``message.usage``), ``content_block_start`` (a
  ``tool_use`` block with ``id``, ``name`` and ``input: {}``),
  ``content_block_delta`` (``text_delta``, ``thinking_delta``,
  ``input_json_delta.partial_json``, ...), ``content_block_stop``,
  ``message_delta`` (cumulative ``usage``), ``message_stop``; ``ping`` keeps the
  connection alive; ``error`` reports a mid-stream failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from app.wire._common import as_str, flatten_output, join_seed, loads, loads_text, request_view, sse_event
from app.wire.anthropic_usage import UsageCounter, anthropic_usage
from app.wire.base import EndKind, EventKind, ProviderKind, RequestView, ResponseSummary, ToolCall, ToolResult

#: Anthropic's ``error.type`` for each HTTP status the gateway answers with
#: (https://docs.anthropic.com/en/api/errors).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",  # a stopped task (see TASK_STOPPED_STATUS)
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
#: Status of a ``task_stopped`` refusal. Anthropic clients read 403 as a login problem
#: (Claude Code: "Please run /login"); 409 shows as "API Error: 409 <message>" and is
#: not retried. (OpenAI endpoints answer :data:`app.errors.STOP_STATUS`, 400.)
TASK_STOPPED_STATUS = 409


def _blocks(content: Any) -> list[Any]:
    return content if isinstance(content, list) else []


def _tool_call(block: dict[str, Any]) -> ToolCall:
    value = block.get("input")
    return ToolCall(
        call_id=as_str(block.get("id")),
        name=as_str(block.get("name")),
        arguments=value if value is not None else {},
    )


def _is_tool_use(block: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(block, dict) and block.get("type") == "tool_use"


class _PartialCall:
    __slots__ = ("call_id", "name", "start_input", "parts", "done")

    def __init__(self, call_id: str, name: str, start_input: Any) -> None:
        self.call_id = call_id
        self.name = name
        self.start_input = start_input
        self.parts: list[str] = []
        self.done = False  # its content_block_stop arrived

    def arguments(self) -> Any:
        if not self.parts:
            return self.start_input if self.start_input is not None else {}
        text = "".join(self.parts)
        parsed = loads(text)
        return parsed if parsed is not None else text


class AnthropicMessagesObserver:
    """Stream observer for Anthropic Messages streaming events.

    Classification: ``content_block_delta`` (text, thinking, tool input) is CONTENT;
    ``message_stop`` and ``error`` are TERMINAL; ``ping`` is HEARTBEAT; everything else
    (``message_start``, ``content_block_start`` even for ``tool_use``,
    ``content_block_stop``, ``message_delta``) is DATA. The SSE ``event:`` name
    decides; data is parsed only for ``message_start``, ``message_delta``, tool-use
    block starts, ``input_json_delta`` deltas and ``content_block_stop`` while a
    tool-use block is open.

    Reconstructed ``arguments`` are the parsed object of the concatenated
    ``partial_json`` (so they fingerprint like a non-streamed ``input``), or the raw
    text when it does not parse; ``{}`` when no delta came.
    """

    __slots__ = ("_calls", "_open", "_usage", "_terminal", "_stopped")

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}
        self._open = 0  # tool_use blocks started and not yet stopped
        self._usage = UsageCounter()
        self._terminal = False
        self._stopped = False  # message_stop arrived (an error event ends a stream too)

    def feed(self, event: str, data: str) -> EventKind:
        name = event
        obj: Any = None
        if not name:
            obj = loads(data)
            name = as_str(obj.get("type")) if isinstance(obj, dict) else ""
        if name == "content_block_delta":
            if '"input_json_delta"' in data:
                self._delta(obj if obj is not None else loads(data))
            return EventKind.CONTENT
        if name == "ping":
            return EventKind.HEARTBEAT
        if name == "message_stop" or name == "error":  # upstream's own end (an error ends it too)
            self._terminal = True
            if name == "message_stop":
                self._stopped = True
            return EventKind.TERMINAL
        if name == "content_block_stop":
            if self._open:
                self._stop(obj if obj is not None else loads(data))
            return EventKind.DATA
        if name == "content_block_start":
            if '"tool_use"' not in data:
                return EventKind.DATA
            obj = obj if obj is not None else loads(data)
            if isinstance(obj, dict):
                self._start(obj)
        elif name == "message_start":
            obj = obj if obj is not None else loads(data)
            message = obj.get("message") if isinstance(obj, dict) else None
            if isinstance(message, dict):
                self._usage.update(message.get("usage"))
        elif name == "message_delta":
            obj = obj if obj is not None else loads(data)
            if isinstance(obj, dict):
                self._usage.update(obj.get("usage"))
        return EventKind.DATA

    def summary(self) -> ResponseSummary:
        """Tool calls whose block completed (``content_block_stop``, or the stream's
        ``message_stop``): a block cut off by an error or a truncation is never run by
        the agent, so it is left out."""
        calls = [
            ToolCall(call_id=p.call_id, name=p.name, arguments=p.arguments())
            for p in self._calls.values()
            if p.done or self._stopped
        ]
        return ResponseSummary(
            tool_calls=calls, usage=self._usage.usage(), terminal_seen=self._terminal
        )

    def _start(self, obj: dict[str, Any]) -> None:
        block = obj.get("content_block")
        index = obj.get("index")
        if _is_tool_use(block) and isinstance(index, int):
            self._calls[index] = _PartialCall(
                as_str(block.get("id")), as_str(block.get("name")), block.get("input")
            )
            self._open += 1

    def _stop(self, obj: Any) -> None:
        partial = self._calls.get(obj.get("index")) if isinstance(obj, dict) else None  # type: ignore[arg-type]
        if partial is not None and not partial.done:
            partial.done = True
            self._open -= 1

    def _delta(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        delta = obj.get("delta")
        partial = self._calls.get(obj.get("index"))  # type: ignore[arg-type]
        if partial is None or not isinstance(delta, dict):
            return
        text = delta.get("partial_json")
        if isinstance(text, str) and text:
            partial.parts.append(text)


class AnthropicMessagesFormat:
    """:class:`app.wire.base.WireFormat` for Anthropic Messages."""

    name = "anthropic_messages"
    provider_kind: ProviderKind = "anthropic"

    def refusal(self, status: int, type: str) -> tuple[int, str]:
        """409 for ``task_stopped`` (:data:`TASK_STOPPED_STATUS`), other statuses as
        they are; the type is Anthropic's for the status (:data:`ERROR_TYPES`,
        ``api_error`` for others)."""
        if type == "task_stopped":
            status = TASK_STOPPED_STATUS
        return status, ERROR_TYPES.get(status, "api_error")

    def stream_end_type(self, kind: EndKind) -> str:
        """``api_error`` for every end kind."""
        return "api_error"

    def needs_stream_usage(self, path: str, body: Mapping[str, Any]) -> bool:
        """Never: ``message_start`` and ``message_delta`` always carry usage."""
        return False

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` unchanged (a copy): nothing to ask for."""
        return dict(body)

    def is_usage_only(self, event: str, data: str) -> bool:
        """Never: the usage events also carry the message's state."""
        return False

    def parse_request(self, body: dict[str, Any]) -> RequestView:
        """Read ``model``, ``stream``, the seed (``system`` text + the first user
        message) and the trailing segment: ``tool_result`` blocks of the user
        messages after the last assistant message, and that message's ``tool_use``
        blocks. ``ToolResult.is_error`` is the block's ``is_error`` when it is a
        boolean, ``None`` when absent."""
        view = request_view(body)
        if not isinstance(body, dict):
            return view
        messages = body.get("messages")
        system = flatten_output(body.get("system"))
        if not isinstance(messages, list):
            view.conversation_seed = system
            return view
        view.conversation_seed = join_seed(system, _first_user_text(messages))
        results: list[ToolResult] = []
        for message in reversed(messages):
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if message.get("role") == "assistant":
                view.tool_calls = [_tool_call(b) for b in _blocks(content) if _is_tool_use(b)]
                view.continued = True
                break
            for block in reversed(_blocks(content)):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    is_error = block.get("is_error")
                    results.append(
                        ToolResult(
                            call_id=as_str(block.get("tool_use_id")),
                            output=flatten_output(block.get("content")),
                            is_error=is_error if isinstance(is_error, bool) else None,
                        )
                    )
        results.reverse()
        view.tool_results = results
        return view

    def parse_response(self, body: dict[str, Any]) -> ResponseSummary:
        """Read ``content[]`` ``tool_use`` blocks and ``usage``."""
        summary = ResponseSummary(terminal_seen=True)
        if not isinstance(body, dict):
            return summary
        summary.tool_calls = [
            _tool_call(b) for b in _blocks(body.get("content")) if _is_tool_use(b)
        ]
        summary.usage = anthropic_usage(body.get("usage"))
        return summary

    def text_delta(self, event: str, data: str) -> str:
        """``delta.text`` of a ``content_block_delta`` whose delta is a ``text_delta``."""
        if '"text_delta"' not in data:
            return ""
        obj = loads_text(data)
        delta = obj.get("delta") if isinstance(obj, dict) else None
        if not isinstance(delta, dict) or delta.get("type") != "text_delta":
            return ""
        return as_str(delta.get("text"))

    def response_text(self, body: dict[str, Any]) -> str:
        """The ``text`` blocks of ``content[]``, joined."""
        blocks = _blocks(body.get("content")) if isinstance(body, dict) else []
        return "".join(as_str(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")

    def stream_observer(self) -> AnthropicMessagesObserver:
        return AnthropicMessagesObserver()

    def error_body(self, message: str, type: str, code: str | None) -> dict[str, Any]:
        """``{"type": "error", "error": {"type", "message"}}``; Anthropic errors have
        no code, so ``code`` is not included."""
        return {"type": "error", "error": {"type": type, "message": message}}

    def stream_error(
        self, message: str, type: str, code: str, *, observer: object | None = None
    ) -> bytes:
        """``event: error`` with the error body; the Anthropic SDKs raise on it.
        ``code`` and ``observer`` are unused."""
        return sse_event("error", self.error_body(message, type, code))

    def inject_notice(self, body: dict[str, Any], notice: str) -> dict[str, Any]:
        """Copy of ``body`` with a ``{"type": "text", "text": notice}`` block appended
        to the last message when it is a user message (string content becomes a
        text block first), else with a new user message holding that block. Other
        messages are shared, not copied."""
        new = dict(body)
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        block = {"type": "text", "text": notice}
        last = messages[-1] if messages else None
        if isinstance(last, dict) and last.get("role") == "user":
            content = last.get("content")
            if isinstance(content, str):
                blocks: list[Any] = [{"type": "text", "text": content}] if content else []
            else:
                blocks = list(_blocks(content))
            new["messages"] = [*messages[:-1], {**last, "content": [*blocks, block]}]
        else:
            new["messages"] = [*messages, {"role": "user", "content": [block]}]
        return new


def _first_user_text(messages: list[Any]) -> str:
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            return flatten_output(message.get("content"))
    return ""


FORMAT = AnthropicMessagesFormat()
"""The Anthropic Messages format singleton."""
