"""A scripted fake model provider ("upstream") for tests, the demo and benchmarks.

It speaks the wire formats taskgate proxies -- OpenAI chat completions, legacy
completions, embeddings, the Responses API and Anthropic Messages -- and answers
with whatever the current *script* says: plain text, endless tool calls, errors,
or a stream pathology for the stream-silence watchdog. Bodies parse with the
official ``openai`` and ``anthropic`` Python SDKs.

Three ways to use it:

- In tests, :class:`UpstreamServer` runs uvicorn in a background thread with its own
  event loop::

      with UpstreamServer() as upstream:           # port 0: a free port
          upstream.script("tool_call", parallel=2)
          client = openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="x")
          ...
          upstream.wait_for(lambda: upstream.open_streams == 0, timeout=1.0)
          upstream.requests[-1].disconnected

- As a command, for demos, benchmarks and real agent CLIs::

      python -m app.testing.upstream --host 127.0.0.1 --port 9000 --scenario loop \\
          --param chunk_delay_s=0.05

- From another process, through the control API (not under ``/v1``):
  ``GET /_upstream/requests`` (recorded requests, open stream counters, the script),
  ``GET|POST /_upstream/script`` (``{"scenario": NAME, "params": {...}}``) and
  ``POST /_upstream/reset`` (forget requests, back to the default ``text`` script).

Endpoints: ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/responses``, ``/v1/responses/input_tokens``, ``/v1/messages``,
``/v1/messages/count_tokens``, ``GET /v1/models`` (and ``/v1/models/{id}``). The
``/v1`` prefix is optional. The script applies to the four generation endpoints
(chat, completions, responses, messages); the others always answer normally. Every
response carries ``x-request-id`` and ``x-ratelimit-*`` headers (Anthropic also
``request-id``). Streams are chosen by ``"stream": true``; chat and completions honour
``stream_options.include_usage`` (a final chunk with ``choices: []`` and ``usage``).
Legacy completions have no tools: they answer ``text``, or the default text when the
script's ``text`` is empty.

Scenarios
---------
Set the default with :meth:`UpstreamServer.script` / ``POST /_upstream/script``, or per
request with the model name ``"scenario:<name>"`` (e.g. ``"scenario:stall"``; params
then take their defaults). All durations are in seconds.

Every scenario accepts the *reply* params, which decide what the model says:

- ``text`` (str, default ``"Hello from the taskgate mock upstream."``): the answer text,
  ``""`` for none.
- ``chunks`` (int, default 5): how many deltas the text, and each tool call's
  arguments, are split into when streamed.
- ``chunk_delay_s`` (float, default 0): pause between content events ("trickle": slow
  but steady). With 0 a whole stream goes out in one write.
- ``name`` (str or None, default None): when set, the reply also calls this tool.
- ``arguments`` (dict, or JSON text, default ``{}``): that tool call's arguments.
- ``parallel`` (int, default 1): how many identical calls the reply carries.
- ``input_tokens`` / ``output_tokens`` (int or None): reported usage; by default about
  one token per 4 bytes of request body / of output text and arguments.

Tool call ids are fresh for every response (``call_<random>``, Anthropic
``toolu_<random>``). "Content events" below are text deltas and tool-call deltas
(chat tool_call chunks, ``response.function_call_arguments.delta``,
``input_json_delta``), which is what the stream pathologies count.

``text`` (default)
    Answer ``text``.
``tool_call`` (alias ``loop``)
    Always call a tool: ``name`` defaults to ``"read_file"``, ``arguments`` to
    ``{"path": "README.md"}``, ``text`` to ``""``. An agent that runs the tool and
    asks again loops forever. Streams split the arguments across ``chunks`` deltas:
    chat's first tool delta carries ``id`` and ``name``, later ones only argument
    fragments; Anthropic sends ``input_json_delta`` ``partial_json`` fragments.
``tool_cycle``
    Call the tools in ``calls`` (list of ``{"name": ..., "arguments": ...}``, default
    ``read_file`` then ``list_dir``) in turn: the n-th request under this script gets
    ``calls[n % len(calls)]``.
``error``
    Respond with HTTP ``status`` (default 500) and an error body in the endpoint's
    shape (OpenAI ``{"error": {...}}``, Anthropic ``{"type": "error", "error": {...}}``).
    Params: ``message``, ``type`` (default derived from the status), ``code``,
    ``headers`` (dict of extra response headers, e.g. ``{"retry-after": "1"}``).
``delay``
    Wait ``delay_s`` (default 5) before sending anything (headers included), then
    answer normally. For total-timeout tests.
``stall``
    Stream everything up to and including the ``after_events``-th content event
    (default 1; 0 sends only the preamble), then go silent for ``stall_s`` (default
    3600) without closing, then finish normally. Non-streamed: wait ``stall_s``, then
    answer.
``heartbeats``
    Stream up to ``after_events`` (default 1) content events, then only heartbeats
    (SSE comment ``: ping`` for OpenAI formats, ``event: ping`` for Anthropic) every
    ``interval_s`` (default 1) for ``duration_s`` (default 3600), then finish normally.
    Non-streamed: wait ``duration_s``, then answer.
``think``
    Stream the preamble (role chunk / ``response.created`` / ``message_start``), then
    nothing for ``think_s`` (default 5) -- or only heartbeats every
    ``heartbeat_interval_s`` when set -- then stream normally. Non-streamed: wait
    ``think_s``, then answer.
``truncate``
    Stream up to ``after_events`` (default 2) content events, never the terminal event
    (``data: [DONE]`` / ``response.completed`` / ``message_stop``), then end the HTTP
    body cleanly. Non-streamed: half of the JSON body, cleanly ended.
``close_mid_event``
    Stream up to ``after_events`` (default 1) content events, write the first half of
    the next event, then drop the connection (no chunked terminator). Non-streamed:
    half of the JSON body, then drop.
``malformed``
    After ``after_events`` (default 1) content events send one event whose ``data:``
    line is not valid JSON, then continue and end normally. Non-streamed: a 200 whose
    body is not JSON.

Every request is recorded (:class:`RecordedRequest`). A response that pauses (delays,
stalls, heartbeats, trickle) watches for the client going away (ASGI
``http.disconnect``) and records ``disconnected`` / ``disconnected_at``
(``time.monotonic()`` seconds) the moment it happens; ``open_streams`` counts
streamed responses still in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import hashlib
import json
import logging
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn

__all__ = [
    "SCENARIOS",
    "AbortConnection",
    "RecordedRequest",
    "Script",
    "UpstreamApp",
    "UpstreamServer",
    "main",
]

Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
T = TypeVar("T")

MOCK_MODEL = "mock-model"
SCENARIO_PREFIX = "scenario:"

# --------------------------------------------------------------------------- scripts

_REPLY_DEFAULTS: dict[str, Any] = {
    "text": "Hello from the taskgate mock upstream.",
    "chunks": 5,
    "chunk_delay_s": 0.0,
    "name": None,
    "arguments": {},
    "parallel": 1,
    "input_tokens": None,
    "output_tokens": None,
}
_TOOL_DEFAULTS: dict[str, Any] = {"text": "", "name": "read_file", "arguments": {"path": "README.md"}}

SCENARIOS: dict[str, dict[str, Any]] = {
    "text": {},
    "tool_call": dict(_TOOL_DEFAULTS),
    "tool_cycle": {
        "text": "",
        "calls": [
            {"name": "read_file", "arguments": {"path": "README.md"}},
            {"name": "list_dir", "arguments": {"path": "."}},
        ],
    },
    "error": {"status": 500, "message": "mock upstream error", "type": None, "code": None, "headers": {}},
    "delay": {"delay_s": 5.0},
    "stall": {"after_events": 1, "stall_s": 3600.0},
    "heartbeats": {"after_events": 1, "interval_s": 1.0, "duration_s": 3600.0},
    "think": {"think_s": 5.0, "heartbeat_interval_s": None},
    "truncate": {"after_events": 2},
    "close_mid_event": {"after_events": 1},
    "malformed": {"after_events": 1},
}
"""Scenario name -> its own params and defaults (on top of the reply params)."""

_ALIASES = {"loop": "tool_call"}


@dataclass(frozen=True, slots=True)
class Script:
    """The behaviour of the upstream: a scenario name and its full params."""

    scenario: str
    params: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "params": self.params}


def make_script(scenario: str, params: dict[str, Any] | None = None) -> Script:
    """Validate ``scenario`` and ``params`` and fill in defaults. Raises ``ValueError``."""
    name = _ALIASES.get(scenario, scenario)
    if name not in SCENARIOS:
        known = ", ".join(sorted([*SCENARIOS, *_ALIASES]))
        raise ValueError(f"unknown scenario {scenario!r} (known: {known})")
    merged = {**_REPLY_DEFAULTS, **SCENARIOS[name]}
    unknown = sorted(set(params or {}) - set(merged))
    if unknown:
        raise ValueError(f"unknown params for scenario {name!r}: {', '.join(unknown)}")
    merged.update(params or {})
    if int(merged["chunks"]) < 1 or int(merged["parallel"]) < 0:
        raise ValueError("chunks must be >= 1 and parallel >= 0")
    if name == "tool_cycle" and not merged["calls"]:
        raise ValueError("tool_cycle needs at least one call")
    return Script(name, merged)


# ------------------------------------------------------------------------- recording


@dataclass(slots=True)
class RecordedRequest:
    """One request the upstream received, and what became of its response.

    Times are ``time.monotonic()`` seconds. ``wire`` is the endpoint kind (``chat``,
    ``completions``, ``responses``, ``messages``, ``embeddings``, ``count_tokens``,
    ``input_tokens``, ``models``) or ``None`` for an unknown path. ``finished`` is
    true once the HTTP body was ended (cleanly, even for ``truncate``);
    ``disconnected`` when the client went away while the response was pausing.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    received_at: float
    wire: str | None = None
    scenario: str | None = None
    stream: bool = False
    status: int | None = None
    finished: bool = False
    finished_at: float | None = None
    disconnected: bool = False
    disconnected_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``body`` as UTF-8 text)."""
        return {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body.decode("utf-8", "replace"),
            "json": self.json,
            "received_at": self.received_at,
            "wire": self.wire,
            "scenario": self.scenario,
            "stream": self.stream,
            "status": self.status,
            "finished": self.finished,
            "finished_at": self.finished_at,
            "disconnected": self.disconnected,
            "disconnected_at": self.disconnected_at,
        }


# ---------------------------------------------------------------------- reply model

_PLACEHOLDER = "@@taskgate-token@@"
_PLACEHOLDER_B = _PLACEHOLDER.encode()

CONTENT, DATA, HEARTBEAT, TERMINAL = "content", "data", "heartbeat", "terminal"
Event = tuple[str, bytes]  # (kind, SSE bytes)


@dataclass(frozen=True, slots=True)
class _Call:
    name: str
    arguments: str  # JSON text, as OpenAI formats carry it

    def input(self) -> Any:
        """The arguments as an object, as Anthropic ``tool_use.input`` carries it."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return {}


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str
    calls: tuple[_Call, ...]
    chunks: int
    input_tokens: int
    output_tokens: int


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"))


def _split(text: str, n: int) -> list[str]:
    """``text`` in at most ``n`` non-empty pieces of near-equal size."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _estimate_tokens(n_bytes: int) -> int:
    return max(1, n_bytes // 4)


def _sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# ------------------------------------------------------------------ chat completions


def _chat_usage(r: _Reply) -> dict[str, int]:
    return {
        "prompt_tokens": r.input_tokens,
        "completion_tokens": r.output_tokens,
        "total_tokens": r.input_tokens + r.output_tokens,
    }


def _chat_tool_calls(r: _Reply, tok: str) -> list[dict[str, Any]]:
    return [
        {"id": f"call_{tok}_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for i, c in enumerate(r.calls)
    ]


def _chat_body(model: str, r: _Reply, tok: str, now: int) -> dict[str, Any]:
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
        "usage": _chat_usage(r),
    }


def _chat_stream(model: str, r: _Reply, tok: str, now: int, include_usage: bool) -> list[Event]:
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
        return _sse(c)

    events: list[Event] = [(DATA, chunk({"role": "assistant", "content": ""}))]
    events += [(CONTENT, chunk({"content": piece})) for piece in _split(r.text, r.chunks)]
    for i, c in enumerate(r.calls):
        head = {"index": i, "id": f"call_{tok}_{i}", "type": "function", "function": {"name": c.name, "arguments": ""}}
        events.append((CONTENT, chunk({"tool_calls": [head]})))
        for frag in _split(c.arguments, r.chunks):
            events.append((CONTENT, chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]})))
    events.append((DATA, chunk({}, "tool_calls" if r.calls else "stop")))
    if include_usage:
        events.append((DATA, _sse({**base, "choices": [], "usage": _chat_usage(r)})))
    events.append((TERMINAL, b"data: [DONE]\n\n"))
    return events


# ------------------------------------------------------------- legacy completions


def _completion_text(r: _Reply) -> str:
    return r.text or _REPLY_DEFAULTS["text"]


def _completions_body(model: str, r: _Reply, tok: str, now: int) -> dict[str, Any]:
    return {
        "id": f"cmpl-{tok}",
        "object": "text_completion",
        "created": now,
        "model": model,
        "choices": [{"index": 0, "text": _completion_text(r), "logprobs": None, "finish_reason": "stop"}],
        "usage": _chat_usage(r),
    }


def _completions_stream(model: str, r: _Reply, tok: str, now: int, include_usage: bool) -> list[Event]:
    base = {"id": f"cmpl-{tok}", "object": "text_completion", "created": now, "model": model}

    def chunk(text: str, finish: str | None = None) -> bytes:
        c = {**base, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return _sse(c)

    events: list[Event] = [(CONTENT, chunk(p)) for p in _split(_completion_text(r), r.chunks)]
    events.append((DATA, chunk("", "stop")))
    if include_usage:
        events.append((DATA, _sse({**base, "choices": [], "usage": _chat_usage(r)})))
    events.append((TERMINAL, b"data: [DONE]\n\n"))
    return events


# ---------------------------------------------------------------------- Responses


def _responses_usage(r: _Reply) -> dict[str, Any]:
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
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []
    return {"type": "message", "id": f"msg_{tok}", "status": status, "role": "assistant", "content": content}


def _responses_call(tok: str, i: int, c: _Call, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{tok}_{i}",
        "call_id": f"call_{tok}_{i}",
        "name": c.name,
        "arguments": c.arguments if status == "completed" else "",
        "status": status,
    }


def _responses_output(r: _Reply, tok: str) -> list[dict[str, Any]]:
    out = [_responses_message(tok, r.text, "completed")] if r.text or not r.calls else []
    return out + [_responses_call(tok, i, c, "completed") for i, c in enumerate(r.calls)]


def _responses_body(model: str, r: _Reply, tok: str, now: int) -> dict[str, Any]:
    return _responses_object(model, tok, now, "completed", _responses_output(r, tok), _responses_usage(r))


def _responses_stream(model: str, r: _Reply, tok: str, now: int) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, type_: str, **fields: Any) -> None:
        events.append((kind, _sse({"type": type_, "sequence_number": len(events), **fields}, type_)))

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
        for piece in _split(r.text, r.chunks):
            emit(CONTENT, "response.output_text.delta", **ids, delta=piece, logprobs=[])
        emit(DATA, "response.output_text.done", **ids, text=r.text, logprobs=[])
        emit(DATA, "response.content_part.done", **ids, part={**part, "text": r.text})
        emit(DATA, "response.output_item.done", output_index=index, item=_responses_message(tok, r.text, "completed"))
        index += 1
    for i, c in enumerate(r.calls):
        item_id = f"fc_{tok}_{i}"
        emit(DATA, "response.output_item.added", output_index=index, item=_responses_call(tok, i, c, "in_progress"))
        for frag in _split(c.arguments, r.chunks):
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
    emit(TERMINAL, "response.completed", response=_responses_body(model, r, tok, now))
    return events


# ---------------------------------------------------------------- Anthropic Messages


def _messages_usage(r: _Reply) -> dict[str, int]:
    return {
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _messages_object(model: str, tok: str, content: list[Any], stop: str | None, usage: dict[str, int]) -> dict[str, Any]:
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


def _messages_tool_use(tok: str, i: int, c: _Call, with_input: bool) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{tok}_{i}", "name": c.name, "input": c.input() if with_input else {}}


def _messages_body(model: str, r: _Reply, tok: str, now: int) -> dict[str, Any]:
    content: list[Any] = [{"type": "text", "text": r.text}] if r.text or not r.calls else []
    content += [_messages_tool_use(tok, i, c, True) for i, c in enumerate(r.calls)]
    return _messages_object(model, tok, content, "tool_use" if r.calls else "end_turn", _messages_usage(r))


_ANTHROPIC_PING = _sse({"type": "ping"}, "ping")


def _messages_stream(model: str, r: _Reply, tok: str, now: int) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, type_: str, **fields: Any) -> None:
        events.append((kind, _sse({"type": type_, **fields}, type_)))

    start_usage = {**_messages_usage(r), "output_tokens": 1}
    emit(DATA, "message_start", message=_messages_object(model, tok, [], None, start_usage))
    index = 0
    if r.text or not r.calls:
        emit(DATA, "content_block_start", index=index, content_block={"type": "text", "text": ""})
        events.append((HEARTBEAT, _ANTHROPIC_PING))
        for piece in _split(r.text, r.chunks):
            emit(CONTENT, "content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        emit(DATA, "content_block_stop", index=index)
        index += 1
    for i, c in enumerate(r.calls):
        emit(DATA, "content_block_start", index=index, content_block=_messages_tool_use(tok, i, c, False))
        if index == 0:
            events.append((HEARTBEAT, _ANTHROPIC_PING))
        for frag in _split(c.arguments, r.chunks):
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


# -------------------------------------------------------------------- wire tables

_BODIES: dict[str, Callable[[str, _Reply, str, int], dict[str, Any]]] = {
    "chat": _chat_body,
    "completions": _completions_body,
    "responses": _responses_body,
    "messages": _messages_body,
}


def _render_stream(wire: str, model: str, r: _Reply, tok: str, now: int, include_usage: bool) -> list[Event]:
    if wire == "chat":
        return _chat_stream(model, r, tok, now, include_usage)
    if wire == "completions":
        return _completions_stream(model, r, tok, now, include_usage)
    if wire == "responses":
        return _responses_stream(model, r, tok, now)
    return _messages_stream(model, r, tok, now)


def _heartbeat(wire: str) -> bytes:
    return _ANTHROPIC_PING if wire == "messages" else b": ping\n\n"


def _malformed(wire: str) -> bytes:
    event = {"responses": "response.output_text.delta", "messages": "content_block_delta"}.get(wire)
    head = f"event: {event}\n" if event else ""
    return f'{head}data: {{"type": "broken", "delta": tru\n\n'.encode()


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error_body(wire: str | None, status: int, message: str, type_: str | None, code: str | None) -> dict[str, Any]:
    if wire in ("messages", "count_tokens"):
        default = _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": type_ or default, "message": message}}
    if type_ is None:
        type_ = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    if code is None and status == 429:
        code = "rate_limit_exceeded"
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


_ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/chat/completions"): "chat",
    ("POST", "/completions"): "completions",
    ("POST", "/responses"): "responses",
    ("POST", "/messages"): "messages",
    ("POST", "/embeddings"): "embeddings",
    ("POST", "/messages/count_tokens"): "count_tokens",
    ("POST", "/responses/input_tokens"): "input_tokens",
    ("GET", "/models"): "models",
}

_MODEL_OBJECT = {"id": MOCK_MODEL, "object": "model", "created": 0, "owned_by": "taskgate"}

_BASE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-ratelimit-limit-requests", b"10000"),
    (b"x-ratelimit-remaining-requests", b"9999"),
    (b"x-ratelimit-limit-tokens", b"10000000"),
    (b"x-ratelimit-remaining-tokens", b"9999000"),
]
_JSON_TYPE = (b"content-type", b"application/json")
_SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


def _embedding(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for ``text``."""
    seed = hashlib.sha256(text.encode()).digest()
    raw = [(seed[i % 32] ^ (i * 37 & 0xFF)) / 127.5 - 1.0 for i in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def _embedding_inputs(value: Any) -> list[str]:
    if isinstance(value, list) and value and not all(isinstance(v, int) for v in value):
        return [v if isinstance(v, str) else json.dumps(v) for v in value]
    return [value if isinstance(value, str) else json.dumps(value)]


# ------------------------------------------------------------------------ exchange


class AbortConnection(Exception):
    """Raised inside the app to make uvicorn drop the TCP connection mid-response."""


class _DropAbortLogs(logging.Filter):
    """Keeps uvicorn from logging our deliberate aborts as application errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info
        return not (exc and isinstance(exc[1], AbortConnection))


def _install_log_filter() -> None:
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropAbortLogs) for f in log.filters):
        log.addFilter(_DropAbortLogs())


class _Exchange:
    """One response in flight: sending, pausing, disconnect detection."""

    __slots__ = ("app", "rec", "receive", "send", "token", "watcher", "content_sent")

    def __init__(self, app: UpstreamApp, rec: RecordedRequest, receive: Receive, send: Send) -> None:
        self.app = app
        self.rec = rec
        self.receive = receive
        self.send = send
        self.token = os.urandom(12).hex().encode()
        self.watcher: asyncio.Task[None] | None = None
        self.content_sent = 0

    async def _watch(self) -> None:
        """Wait for ``http.disconnect`` (read once the request body has been consumed)."""
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if not self.rec.finished:
            self.rec.disconnected = True
            self.rec.disconnected_at = time.monotonic()

    async def pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; ``False`` (and recorded) if the client went away meanwhile."""
        if self.watcher is None:
            self.watcher = asyncio.ensure_future(self._watch())
        closing = self.app._closing_future()
        if closing.done():
            raise AbortConnection("upstream shutting down")
        if seconds > 0:
            await asyncio.wait((self.watcher, closing), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(0)
        if self.watcher.done():
            return False
        if closing.done():
            raise AbortConnection("upstream shutting down")
        return True

    def close(self) -> None:
        if self.watcher is not None and not self.watcher.done():
            self.watcher.cancel()

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.rec.status = status
        request_id = b"req_" + self.token
        extra = [(b"x-request-id", request_id)]
        if self.rec.wire in ("messages", "count_tokens"):
            extra.append((b"request-id", request_id))
        await self.send({"type": "http.response.start", "status": status, "headers": headers + extra + _BASE_HEADERS})

    def fill(self, data: bytes) -> bytes:
        """``data`` with this response's ids in place of the cached placeholder."""
        return data.replace(_PLACEHOLDER_B, self.token) if _PLACEHOLDER_B in data else data

    async def write(self, data: bytes, last: bool = False) -> None:
        data = self.fill(data)
        await self.send({"type": "http.response.body", "body": data, "more_body": not last})
        if last:
            self.rec.finished = True
            self.rec.finished_at = time.monotonic()

    async def json(self, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        data = self.fill(body) if isinstance(body, bytes) else _dumps(body)
        await self.start(status, [_JSON_TYPE, (b"content-length", str(len(data)).encode()), *(headers or [])])
        await self.write(data, last=True)

    async def events(self, events: Iterable[Event], delay_s: float) -> bool:
        """Send SSE events, pausing ``delay_s`` before every content event but the first."""
        events = list(events)
        if delay_s <= 0:
            self.content_sent += sum(1 for kind, _ in events if kind == CONTENT)
            if events:
                await self.write(b"".join(data for _, data in events))
            return True
        for kind, data in events:
            if kind == CONTENT:
                if self.content_sent and not await self.pause(delay_s):
                    return False
                self.content_sent += 1
            await self.write(data)
        return True

    async def heartbeats(self, beat: bytes, interval_s: float, duration_s: float) -> bool:
        """Send only ``beat`` every ``interval_s`` for ``duration_s``."""
        deadline = time.monotonic() + duration_s
        while (left := deadline - time.monotonic()) > 0:
            if not await self.pause(min(interval_s, left)):
                return False
            if left >= interval_s:
                await self.write(beat)
        return True


def _content_cut(events: list[Event], after: int) -> int:
    """Index of the ``after + 1``-th content event (``len(events)`` if there is none)."""
    seen = 0
    for i, (kind, _) in enumerate(events):
        if kind == CONTENT:
            if seen == after:
                return i
            seen += 1
    return len(events)


def _terminal_index(events: list[Event]) -> int:
    return next((i for i, (kind, _) in enumerate(events) if kind == TERMINAL), len(events))


# ----------------------------------------------------------------------------- app

_PLAIN = frozenset({"text", "tool_call", "tool_cycle", "delay"})
"""Scenarios whose streams are sent as they are (paced only by ``chunk_delay_s``)."""


class UpstreamApp:
    """The ASGI app. Thread-safe to script and inspect from outside its event loop."""

    def __init__(self, script: Script | None = None, *, max_recorded: int | None = None) -> None:
        self._lock = threading.Lock()
        self._script = script or make_script("text")
        self._requests: collections.deque[RecordedRequest] = collections.deque(maxlen=max_recorded)
        self._cycle_count = 0
        self._cache: dict[tuple[Any, ...], tuple[list[Event], bytes] | bytes] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Future[None] | None = None
        self.open_streams = 0
        self.open_requests = 0
        self.streams_opened = 0

    # -- scripting and inspection (any thread)

    def script(self, scenario: str, **params: Any) -> Script:
        """Set the default behaviour. See the module docstring for scenarios."""
        new = make_script(scenario, params)
        with self._lock:
            self._script = new
            self._cycle_count = 0
            self._cache.clear()
        return new

    @property
    def current_script(self) -> Script:
        return self._script

    def reset(self) -> None:
        """Forget recorded requests and go back to the default ``text`` script."""
        with self._lock:
            self._requests.clear()
            self._script = make_script("text")
            self._cycle_count = 0
            self._cache.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def disconnects(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.disconnected]

    def close_streams(self) -> None:
        """Abort every pausing response (used on shutdown). Callable from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._set_closing)

    def _set_closing(self) -> None:
        fut = self._closing_future()
        if not fut.done():
            fut.set_result(None)

    def _closing_future(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if self._closing is None or self._loop is not loop:
            self._loop = loop
            self._closing = loop.create_future()
        return self._closing

    # -- ASGI

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        path = scope["path"]
        if path.startswith("/_upstream/"):
            await self._control(scope["method"], path, body, send)
            return
        rec = self._record(scope, body)
        ex = _Exchange(self, rec, receive, send)
        self.open_requests += 1
        try:
            await self._dispatch(ex, scope["method"], path)
        finally:
            self.open_requests -= 1
            ex.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._closing = None
                self._closing_future()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _record(self, scope: dict[str, Any], body: bytes) -> RecordedRequest:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        query = scope.get("query_string", b"")
        path = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rec = RecordedRequest(scope["method"], path, headers, body, parsed, time.monotonic())
        with self._lock:
            self._requests.append(rec)
        return rec

    async def _dispatch(self, ex: _Exchange, method: str, path: str) -> None:
        route = path[3:] if path.startswith("/v1/") else path
        wire = _ROUTES.get((method, route.rstrip("/") or "/"))
        if wire is None and method == "GET" and route.startswith("/models/"):
            ex.rec.wire = "models"
            await ex.json(200, {**_MODEL_OBJECT, "id": route[len("/models/") :]})
            return
        ex.rec.wire = wire
        body = ex.rec.json if isinstance(ex.rec.json, dict) else {}
        if wire is None:
            await ex.json(404, _error_body(None, 404, f"no route for {method} {path}", None, None))
        elif wire == "models":
            await ex.json(200, {"object": "list", "data": [_MODEL_OBJECT]})
        elif wire == "embeddings":
            await ex.json(200, _embeddings_body(body, len(ex.rec.body)))
        elif wire == "count_tokens":
            await ex.json(200, {"input_tokens": self._input_tokens(ex.rec)})
        elif wire == "input_tokens":
            await ex.json(200, {"object": "response.input_tokens", "input_tokens": self._input_tokens(ex.rec)})
        elif not isinstance(ex.rec.json, dict):
            await ex.json(400, _error_body(wire, 400, "request body must be a JSON object", None, None))
        else:
            await self._generate(ex, wire, body)

    def _input_tokens(self, rec: RecordedRequest) -> int:
        fixed = self._script.params.get("input_tokens")
        return int(fixed) if fixed is not None else _estimate_tokens(len(rec.body))

    # -- generation

    def _script_for(self, model: Any) -> Script:
        if isinstance(model, str) and model.startswith(SCENARIO_PREFIX):
            return make_script(model[len(SCENARIO_PREFIX) :])
        return self._script

    def _reply(self, script: Script, rec: RecordedRequest) -> _Reply:
        p = script.params
        text = str(p["text"] or "")
        if script.scenario == "tool_cycle":
            with self._lock:
                n = self._cycle_count
                self._cycle_count += 1
            call = p["calls"][n % len(p["calls"])]
            calls: tuple[_Call, ...] = (_Call(call["name"], _arguments_text(call.get("arguments", {}))),)
        elif p["name"]:
            calls = (_Call(p["name"], _arguments_text(p["arguments"])),) * int(p["parallel"])
        else:
            calls = ()
        inp = p["input_tokens"]
        out = p["output_tokens"]
        out_bytes = len(text) + sum(len(c.arguments) + len(c.name) for c in calls)
        return _Reply(
            text=text,
            calls=calls,
            chunks=int(p["chunks"]),
            input_tokens=int(inp) if inp is not None else _estimate_tokens(len(rec.body)),
            output_tokens=int(out) if out is not None else _estimate_tokens(out_bytes),
        )

    def _rendered(self, wire: str, model: str, reply: _Reply, stream: bool, include_usage: bool) -> Any:
        """The response for ``reply`` with ids as placeholders, cached per second."""
        now = int(time.time())
        key = (wire, model, reply, stream, include_usage, now)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        value: tuple[list[Event], bytes] | bytes
        if stream:
            events = _render_stream(wire, model, reply, _PLACEHOLDER, now, include_usage)
            value = (events, b"".join(data for _, data in events))
        else:
            value = _dumps(_BODIES[wire](model, reply, _PLACEHOLDER, now))
        if len(self._cache) >= 256:
            self._cache.clear()
        self._cache[key] = value
        return value

    async def _generate(self, ex: _Exchange, wire: str, body: dict[str, Any]) -> None:
        rec = ex.rec
        model = body.get("model")
        try:
            script = self._script_for(model)
        except ValueError as exc:
            await ex.json(400, _error_body(wire, 400, str(exc), None, None))
            return
        p = script.params
        rec.scenario = script.scenario
        rec.stream = stream = body.get("stream") is True
        if script.scenario == "error":
            headers = [(str(k).lower().encode(), str(v).encode()) for k, v in (p["headers"] or {}).items()]
            status = int(p["status"])
            await ex.json(status, _error_body(wire, status, str(p["message"]), p["type"], p["code"]), headers)
            return
        if script.scenario == "delay" and not await ex.pause(float(p["delay_s"])):
            return
        reply = self._reply(script, rec)
        model_name = model if isinstance(model, str) else MOCK_MODEL
        if not stream:
            await self._answer(ex, script, self._rendered(wire, model_name, reply, False, False))
            return
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        events, joined = self._rendered(wire, model_name, reply, True, include_usage)
        self.open_streams += 1
        self.streams_opened += 1
        try:
            await ex.start(200, _SSE_HEADERS)
            if script.scenario in _PLAIN and float(p["chunk_delay_s"]) <= 0:
                await ex.write(joined, last=True)
            else:
                await self._stream(ex, script, wire, events)
        finally:
            self.open_streams -= 1

    async def _answer(self, ex: _Exchange, script: Script, body: bytes) -> None:
        """A non-streamed answer, with the scenario's pathology if it has one."""
        name, p = script.scenario, script.params
        wait = {"stall": "stall_s", "heartbeats": "duration_s", "think": "think_s"}.get(name)
        if wait is not None and not await ex.pause(float(p[wait])):
            return
        if name in ("truncate", "close_mid_event"):
            await ex.start(200, [_JSON_TYPE])
            await ex.write(body[: len(body) // 2])
            if name == "close_mid_event":
                raise AbortConnection("close_mid_event")
            await ex.write(b"", last=True)
        elif name == "malformed":
            await ex.json(200, b'{"id": "broken", "choices": [')
        else:
            await ex.json(200, body)

    async def _stream(self, ex: _Exchange, script: Script, wire: str, events: list[Event]) -> None:
        name, p = script.scenario, script.params
        delay = float(p["chunk_delay_s"])
        cut = _content_cut(events, int(p.get("after_events", 0)))
        head, tail = events[:cut], events[cut:]
        if name == "stall":
            ok = await ex.events(head, delay) and await ex.pause(float(p["stall_s"])) and await ex.events(tail, delay)
        elif name == "heartbeats":
            beats = ex.heartbeats(_heartbeat(wire), float(p["interval_s"]), float(p["duration_s"]))
            ok = await ex.events(head, delay) and await beats and await ex.events(tail, delay)
        elif name == "think":  # no after_events: head is the preamble before any content
            interval = p["heartbeat_interval_s"]
            if not await ex.events(head, delay):
                return
            if interval:
                ok = await ex.heartbeats(_heartbeat(wire), float(interval), float(p["think_s"]))
            else:
                ok = await ex.pause(float(p["think_s"]))
            ok = ok and await ex.events(tail, delay)
        elif name == "truncate":
            ok = await ex.events(events[: min(cut, _terminal_index(events))], delay)
        elif name == "close_mid_event":
            if await ex.events(head, delay):
                partial = (tail or events[-1:])[0][1]
                await ex.write(partial[: len(partial) // 2])
                raise AbortConnection("close_mid_event")
            return
        elif name == "malformed":
            ok = await ex.events(head, delay)
            if ok:
                await ex.write(_malformed(wire))
                ok = await ex.events(tail, delay)
        else:
            ok = await ex.events(events, delay)
        if ok:
            await ex.write(b"", last=True)

    # -- control API

    async def _control(self, method: str, path: str, body: bytes, send: Send) -> None:
        status, payload = 200, None
        if method == "GET" and path == "/_upstream/requests":
            payload = {
                "requests": [r.to_json() for r in self.requests],
                "open_streams": self.open_streams,
                "open_requests": self.open_requests,
                "streams_opened": self.streams_opened,
                "script": self._script.to_json(),
            }
        elif path == "/_upstream/script" and method == "GET":
            payload = self._script.to_json()
        elif path == "/_upstream/script" and method == "POST":
            try:
                data = json.loads(body or b"{}")
                payload = self.script(str(data.get("scenario", "text")), **(data.get("params") or {})).to_json()
            except (ValueError, TypeError, AttributeError) as exc:
                status, payload = 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
        elif method == "POST" and path == "/_upstream/reset":
            self.reset()
            payload = {"ok": True}
        else:
            status, payload = 404, {"error": {"message": f"no route for {method} {path}", "type": "not_found"}}
        data = _dumps(payload)
        headers = [_JSON_TYPE, (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _embeddings_body(body: dict[str, Any], n_bytes: int) -> dict[str, Any]:
    inputs = _embedding_inputs(body.get("input", ""))
    dims = body.get("dimensions")
    dims = dims if isinstance(dims, int) and 0 < dims <= 4096 else 8
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for i, text in enumerate(inputs):
        vec = _embedding(text, dims)
        value: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if as_base64 else vec
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = _estimate_tokens(n_bytes)
    model = body.get("model") if isinstance(body.get("model"), str) else MOCK_MODEL
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


# -------------------------------------------------------------------------- server


class _Server(uvicorn.Server):
    """uvicorn, but shutdown first aborts responses that are pausing (stalls, heartbeats),
    which would otherwise hold the graceful shutdown for their full duration."""

    def __init__(self, config: uvicorn.Config, app: UpstreamApp) -> None:
        super().__init__(config)
        self.upstream_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.upstream_app._set_closing()
        await super().shutdown(sockets)


class UpstreamServer:
    """Runs :class:`UpstreamApp` under uvicorn in a background thread.

    Use as a context manager or call :meth:`start` / :meth:`stop`. ``port=0`` picks a
    free port; :attr:`base_url` is known once started (``http://HOST:PORT``, without
    ``/v1``). Scripting and inspection delegate to the app.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        scenario: str = "text",
        log_level: str = "warning",
        max_recorded: int | None = None,
        **params: Any,
    ) -> None:
        self.host = host
        self.port = port
        self.log_level = log_level
        self.app = UpstreamApp(make_script(scenario, params), max_recorded=max_recorded)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> UpstreamServer:
        if self._thread is not None:
            return self
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
        )
        _install_log_filter()
        self._server = _Server(config, self.app)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"upstream:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("mock upstream failed to start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        self._server = None
        self._thread = None

    def __enter__(self) -> UpstreamServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- delegation

    def script(self, scenario: str, **params: Any) -> Script:
        """Set the default behaviour. See the module docstring for scenarios."""
        return self.app.script(scenario, **params)

    def reset(self) -> None:
        """Forget recorded requests and go back to the default ``text`` script."""
        self.app.reset()

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.app.requests

    @property
    def disconnects(self) -> list[RecordedRequest]:
        return self.app.disconnects

    @property
    def open_streams(self) -> int:
        return self.app.open_streams

    @property
    def open_requests(self) -> int:
        return self.app.open_requests

    def wait_for(self, predicate: Callable[[], T], timeout: float = 2.0, interval: float = 0.005) -> T:
        """Poll ``predicate`` until it returns something truthy and return that.

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(interval)


# ----------------------------------------------------------------------------- CLI


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def main(argv: list[str] | None = None) -> None:
    """``python -m app.testing.upstream``: serve the mock upstream until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m app.testing.upstream",
        description="Scripted fake OpenAI/Anthropic upstream for taskgate tests, demos and benchmarks.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument(
        "--scenario", default="text", help=f"one of: {', '.join(sorted([*SCENARIOS, *_ALIASES]))} (default text)"
    )
    parser.add_argument(
        "--param", "-p", action="append", type=_param, default=[], metavar="KEY=VALUE",
        help="scenario param; VALUE is parsed as JSON when it can be (repeatable)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--access-log", action="store_true", help="log every request (slower)")
    parser.add_argument("--max-recorded", type=int, default=10_000, help="requests kept for /_upstream/requests")
    args = parser.parse_args(argv)
    try:
        script = make_script(args.scenario, dict(args.param))
    except ValueError as exc:
        parser.error(str(exc))
    app = UpstreamApp(script, max_recorded=args.max_recorded)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    _install_log_filter()
    server = _Server(config, app)
    print(f"taskgate mock upstream: http://{args.host}:{args.port}/v1  scenario={script.scenario} {script.params}")
    server.run()


if __name__ == "__main__":
    main()
