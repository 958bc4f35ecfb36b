"""OpenAI chat completions wire format (``/v1/chat/completions``).

Also serves the legacy ``/v1/completions`` (``prompt`` in, ``choices[].text`` out)
and ``/v1/embeddings`` (never streams; only ``model`` and ``usage`` matter).
Shapes follow the OpenAI API reference, "Chat Completions":

- request: ``messages[]``; an assistant message carries ``tool_calls[]`` of
  ``{"id", "type": "function", "function": {"name", "arguments"}}`` where
  ``arguments`` is JSON text; each result is ``{"role": "tool", "tool_call_id",
  "content"}`` (string or list of content parts);
- response: ``choices[].message.tool_calls``; ``usage.prompt_tokens`` /
  ``usage.completion_tokens``;
- stream: ``data: {chat.completion.chunk}`` events; tool calls arrive as
  ``choices[].delta.tool_calls[]`` keyed by ``index`` (``id`` and ``function.name``
  on the first delta of an index, ``function.arguments`` split across deltas);
  with ``stream_options.include_usage`` a last chunk has ``choices: []`` and
  ``usage``; the stream ends with ``data: [DONE]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from app.wire._common import (
    as_str,
    flatten_output,
    join_seed,
    loads,
    loads_text,
    openai_end_type,
    openai_error_body,
    openai_usage,
    request_view,
    sse_event,
)
from app.wire.base import EndKind, EventKind, ProviderKind, RequestView, ResponseSummary, ToolCall, ToolResult, Usage

# Keys whose non-empty string value is model output (in ``delta`` or, for legacy
# completions, ``choices[].text``). Inside JSON strings quotes are escaped, so these
# patterns only match real keys.
_CONTENT_KEYS = ("content", "reasoning_content", "reasoning", "refusal", "text")
_COMPACT_CONTENT = tuple(f'"{key}":"' for key in _CONTENT_KEYS)
_CONTENT_RE = re.compile(r'"(?:content|reasoning_content|reasoning|refusal|text)"\s*:\s*"[^"]')
_USAGE_RE = re.compile(r'"usage"\s*:\s*\{')
_FINISH_RE = re.compile(r'"finish_reason"\s*:\s*"')

_DONE_BYTES = b"data: [DONE]\n\n"

#: Paths whose streams report usage only when ``stream_options.include_usage`` asks
#: (``/v1/embeddings`` never streams).
USAGE_ON_REQUEST_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


class _PartialCall:
    __slots__ = ("call_id", "name", "arguments")

    def __init__(self) -> None:
        self.call_id = ""
        self.name = ""
        self.arguments: list[str] = []


class ChatCompletionsObserver:
    """Stream observer for ``chat.completion.chunk`` events.

    Classification: ``data: [DONE]`` and an ``{"error": ...}`` chunk are TERMINAL; a
    chunk with a non-empty ``delta.content``, ``delta.reasoning_content``,
    ``delta.reasoning``, ``delta.refusal``, ``choices[].text`` or ``delta.tool_calls``
    is CONTENT; any other event (role header, finish reason, usage chunk) is DATA.
    Only chunks mentioning ``tool_calls`` or a ``usage`` object are parsed, and, while
    a choice has tool calls, chunks carrying a ``finish_reason``.
    """

    __slots__ = ("_calls", "_by_id", "_last", "_finished", "_usage", "_terminal", "_done")

    def __init__(self) -> None:
        # Made with the first tool call or finish_reason (most streams have none, and an
        # empty set is ~216 B held per open stream).
        self._calls: dict[tuple[int, int], _PartialCall] | None = None
        self._by_id: dict[tuple[int, str], int] | None = None  # (choice, call id) -> tool index
        self._last: dict[int, int] | None = None  # choice -> last tool index seen
        self._finished: set[int] | None = None  # choices whose finish_reason arrived
        self._usage: Usage | None = None
        self._terminal = False
        self._done = False  # data: [DONE] arrived with no error chunk before it

    def feed(self, event: str, data: str) -> EventKind:
        if data[:1] != "{":
            if data.strip() == "[DONE]":
                if not self._terminal:
                    self._done = True
                self._terminal = True
                return EventKind.TERMINAL
            if not data.lstrip().startswith("{"):
                return EventKind.DATA
        if data.startswith('{"error"'):  # upstream's own error chunk: it ends the stream
            self._terminal = True
            return EventKind.TERMINAL
        has_calls = '"tool_calls"' in data
        has_usage = (
            '"usage"' in data and '"usage":null' not in data and _USAGE_RE.search(data) is not None
        )
        if not has_calls and not has_usage and not (self._last and _FINISH_RE.search(data)):
            return EventKind.CONTENT if _has_content(data) else EventKind.DATA
        chunk = loads(data)
        if not isinstance(chunk, dict):
            return EventKind.DATA
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self._usage = usage
        return self._take_choices(chunk.get("choices"))

    def summary(self) -> ResponseSummary:
        """Tool calls that completed: their choice's ``finish_reason`` or ``[DONE]``
        arrived, or their arguments are already a whole JSON value (chat streams mark
        no single call's end). A call cut off by an error chunk or a truncation is
        never run by the agent, so it is left out."""
        calls: list[ToolCall] = []
        finished = self._finished or ()
        for (ci, _), p in (self._calls or {}).items():
            arguments = "".join(p.arguments)
            if self._done or ci in finished or loads(arguments) is not None:
                calls.append(ToolCall(call_id=p.call_id, name=p.name, arguments=arguments))
        return ResponseSummary(tool_calls=calls, usage=self._usage, terminal_seen=self._terminal)

    def _take_choices(self, choices: Any) -> EventKind:
        """Update tool calls from a parsed chunk's choices; classify the chunk."""
        kind = EventKind.DATA
        if not isinstance(choices, list):
            return kind
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                index = choice.get("index")
                if self._finished is None:
                    self._finished = set()
                self._finished.add(index if isinstance(index, int) else 0)
            text = choice.get("text")
            if isinstance(text, str) and text:
                kind = EventKind.CONTENT
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if any(isinstance(delta.get(k), str) and delta.get(k) for k in _CONTENT_KEYS):
                kind = EventKind.CONTENT
            deltas = delta.get("tool_calls")
            if not isinstance(deltas, list):
                continue
            ci = choice.get("index")
            ci = ci if isinstance(ci, int) else 0
            for tc in deltas:
                if isinstance(tc, dict):
                    self._take_delta(ci, tc)
                    kind = EventKind.CONTENT
        return kind

    def _take_delta(self, ci: int, tc: dict[str, Any]) -> None:
        if self._calls is None or self._by_id is None or self._last is None:
            self._calls, self._by_id, self._last = {}, {}, {}
        calls, by_id, last = self._calls, self._by_id, self._last
        call_id = as_str(tc.get("id"))
        ti = tc.get("index")
        if not isinstance(ti, int) or isinstance(ti, bool):
            # Some providers omit ``index``: a new id starts a call, else continue the last.
            known = by_id.get((ci, call_id)) if call_id else None
            if known is not None:
                ti = known
            elif call_id or ci not in last:
                ti = sum(1 for c, _ in calls if c == ci)
                while (ci, ti) in calls:
                    ti += 1
            else:
                ti = last[ci]
        last[ci] = ti
        partial = calls.get((ci, ti))
        if partial is None:
            partial = calls[(ci, ti)] = _PartialCall()
        if call_id and not partial.call_id:
            partial.call_id = call_id
            by_id[(ci, call_id)] = ti
        fn = tc.get("function")
        if isinstance(fn, dict):
            name = fn.get("name")
            if name and isinstance(name, str) and not partial.name:
                partial.name = name
            args = fn.get("arguments")
            if args and isinstance(args, str):
                partial.arguments.append(args)


def _has_content(data: str) -> bool:
    """Whether an unparsed chunk has a non-empty output string (see _CONTENT_KEYS)."""
    for key in _COMPACT_CONTENT:
        i = data.find(key)
        if i >= 0 and data[i + len(key) : i + len(key) + 1] not in ('"', ""):
            return True
    return _CONTENT_RE.search(data) is not None


def _usage(raw: Any) -> Usage | None:
    return openai_usage(raw, "prompt_tokens", "completion_tokens", "prompt_tokens_details")


def _tool_calls(raw: Any) -> list[ToolCall]:
    calls: list[ToolCall] = []
    if not isinstance(raw, list):
        return calls
    for tc in raw:
        if not isinstance(tc, dict):
            continue
        fn = tc.get("function")
        fn = fn if isinstance(fn, dict) else {}
        args = fn.get("arguments")
        calls.append(
            ToolCall(
                call_id=as_str(tc.get("id")),
                name=as_str(fn.get("name")),
                arguments=args if args is not None else "",
            )
        )
    return calls


class ChatCompletionsFormat:
    """:class:`app.wire.base.WireFormat` for OpenAI chat completions."""

    name = "chat_completions"
    provider_kind: ProviderKind = "openai"

    def refusal(self, status: int, type: str) -> tuple[int, str]:
        """The gateway's own status and OpenAI type, unchanged."""
        return status, type

    def stream_end_type(self, kind: EndKind) -> str:
        """``upstream_stalled``, ``task_stopped`` (repeated output), else
        ``upstream_error``."""
        return openai_end_type(kind)

    def needs_stream_usage(self, path: str, body: Mapping[str, Any]) -> bool:
        """A streamed chat completion or legacy completion (``"stream": true``) whose
        ``stream_options.include_usage`` is not ``true``: without it the stream
        carries no usage."""
        if path not in USAGE_ON_REQUEST_PATHS or body.get("stream") is not True:
            return False
        options = body.get("stream_options")
        return not (isinstance(options, dict) and options.get("include_usage") is True)

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``body`` with ``stream_options.include_usage`` set (other options kept)."""
        options = body.get("stream_options")
        return {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}

    def is_usage_only(self, event: str, data: str) -> bool:
        """The chunk ``include_usage`` adds: ``"choices": []`` with a ``usage``. Cheap for
        other chunks (only those naming a non-null ``usage`` are parsed)."""
        if '"usage"' not in data or '"usage":null' in data:
            return False
        chunk = loads(data)
        return isinstance(chunk, dict) and chunk.get("choices") == [] and chunk.get("usage") is not None

    def parse_request(self, body: dict[str, Any]) -> RequestView:
        """Read ``model``, ``stream``, the conversation seed (first ``system`` /
        ``developer`` message before the first ``user`` message, then that user
        message; legacy ``prompt`` when there are no messages) and the trailing
        segment: ``role: "tool"`` results after the last assistant message and that
        message's ``tool_calls``."""
        view = request_view(body)
        if not isinstance(body, dict):
            return view
        messages = body.get("messages")
        if not isinstance(messages, list):
            view.conversation_seed = _prompt_seed(body.get("prompt"))
            return view
        view.conversation_seed = _seed(messages)
        results: list[ToolResult] = []
        for message in reversed(messages):
            if not isinstance(message, dict):
                continue
            role = message.get("role")
            if role == "assistant":
                view.tool_calls = _tool_calls(message.get("tool_calls"))
                view.continued = True
                break
            if role == "tool":
                results.append(
                    ToolResult(
                        call_id=as_str(message.get("tool_call_id")),
                        output=flatten_output(message.get("content")),
                    )
                )
        results.reverse()
        view.tool_results = results
        return view

    def parse_response(self, body: dict[str, Any]) -> ResponseSummary:
        """Read ``choices[].message.tool_calls`` (in choice order) and ``usage``."""
        summary = ResponseSummary(terminal_seen=True)
        if not isinstance(body, dict):
            return summary
        choices = body.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                message = choice.get("message") if isinstance(choice, dict) else None
                if isinstance(message, dict):
                    summary.tool_calls.extend(_tool_calls(message.get("tool_calls")))
        summary.usage = _usage(body.get("usage"))
        return summary

    def stream_observer(self) -> ChatCompletionsObserver:
        return ChatCompletionsObserver()

    def error_body(self, message: str, type: str, code: str | None) -> dict[str, Any]:
        """``{"error": {"message", "type", "code", "param": null}}``."""
        return openai_error_body(message, type, code)

    def stream_error(
        self, message: str, type: str, code: str, *, observer: object | None = None
    ) -> bytes:
        """``data: {"error": {"message", "type", "code", "param"}}`` then ``data: [DONE]``:
        the chat completions error object, with ``message`` the sentence itself, as an
        OpenAI stream carries an error; the openai SDKs raise ``APIError`` on a chunk
        with an ``error`` key, its ``.message`` the sentence and ``.code``, ``.type`` set.

        Never another format's error document inside ``message``: that printed as raw
        JSON in every OpenAI client (issue 34). ``observer`` is unused."""
        return sse_event(None, openai_error_body(message, type, code)) + _DONE_BYTES

    def text_delta(self, event: str, data: str) -> str:
        """``choices[].delta.content`` (legacy: ``choices[].text``) of one chunk."""
        if '"content"' not in data and '"text"' not in data:
            return ""
        chunk = loads_text(data)
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not isinstance(choices, list):
            return ""
        out = []
        for choice in choices:
            if isinstance(choice, dict):
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
                if isinstance(text, str):
                    out.append(text)
        return "".join(out)

    def response_text(self, body: dict[str, Any]) -> str:
        """``choices[].message.content`` (legacy: ``choices[].text``), joined."""
        choices = body.get("choices") if isinstance(body, dict) else None
        out = []
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict):
                message = choice.get("message")
                text = message.get("content") if isinstance(message, dict) else choice.get("text")
                out.append(flatten_output(text) if text is not None else "")
        return "".join(out)

    def inject_notice(self, body: dict[str, Any], notice: str) -> dict[str, Any]:
        """Copy of ``body`` with ``{"role": "system", "content": notice}`` appended to
        ``messages`` (legacy ``prompt`` string: notice appended after a blank line)."""
        new = dict(body)
        messages = body.get("messages")
        if isinstance(messages, list):
            new["messages"] = [*messages, {"role": "system", "content": notice}]
        elif isinstance(body.get("prompt"), str):
            new["prompt"] = f"{body['prompt']}\n\n{notice}"
        return new


def _seed(messages: list[Any]) -> str:
    instructions = ""
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer") and not instructions:
            instructions = flatten_output(message.get("content"))
        elif role == "user":
            return join_seed(instructions, flatten_output(message.get("content")))
    return instructions


def _prompt_seed(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    return ""


FORMAT = ChatCompletionsFormat()
"""The chat completions format singleton."""
