"""Recorded agent runs (``taskgate-run/1``, bench/recordings/README.md): read, turned into
the requests the agent sent, and the recorded answers rendered as a provider would send
them. Pure: no I/O but :func:`load`.

Request *k* (turns numbered from 1) carries the system prompt, the task and every turn
before *k*: its assistant message, then its tool results (``role: "tool"``) and its user
message. The answer to request *k* is turn *k*'s ``assistant``, as a chat completion:
whole, or as SSE events (:data:`STREAM_PIECE_CHARS` characters of text per event, then
the tool calls, the finish event, usage when asked for, ``[DONE]``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "taskgate-run/1"
#: Characters of answer text per streamed event.
STREAM_PIECE_CHARS = 64


@dataclass(frozen=True)
class Recording:
    """One run: its header (``run``, ``system``, ``user``, ``expect``, ...) and its turns."""

    header: dict[str, Any]
    turns: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.header["run"])

    @property
    def expect(self) -> dict[str, Any]:
        return dict(self.header.get("expect") or {})


def load(path: Path) -> Recording:
    """The recording in ``path``; ``ValueError`` when it is not ``taskgate-run/1``."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or lines[0].get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} recording (its first line is the header)")
    turns = lines[1:]
    if [t.get("turn") for t in turns] != list(range(1, len(turns) + 1)):
        raise ValueError(f"{path}: turns must be numbered 1, 2, ... in order")
    return Recording(lines[0], turns)


def _assistant_message(turn: dict[str, Any]) -> dict[str, Any]:
    answer = turn["assistant"]
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("text") or None}
    calls = answer.get("tool_calls") or []
    if calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                                 for c in calls]
    return message


def messages(recording: Recording, k: int) -> list[dict[str, Any]]:
    """The chat completions ``messages`` of request ``k`` (1-based)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": recording.header["system"]},
                                 {"role": "user", "content": recording.header["user"]}]
    for turn in recording.turns[:k - 1]:
        out.append(_assistant_message(turn))
        out.extend({"role": "tool", "tool_call_id": r["tool_call_id"], "content": r["output"]}
                   for r in turn.get("results") or [])
        if turn.get("user"):
            out.append({"role": "user", "content": turn["user"]})
    return out


def turn_of(body: dict[str, Any]) -> int:
    """Which turn a request asks for: one more than the assistant messages it carries."""
    return 1 + sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


def _usage(turn: dict[str, Any]) -> dict[str, int]:
    completion = max(1, len(json.dumps(turn["assistant"])) // 4)
    return {"prompt_tokens": 100, "completion_tokens": completion, "total_tokens": 100 + completion}


def completion(turn: dict[str, Any], model: str) -> bytes:
    """Turn ``turn``'s answer as one chat completion."""
    message = _assistant_message(turn)
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return json.dumps({"id": f"chatcmpl-replay-{turn['turn']}", "object": "chat.completion", "created": 0,
                       "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                       "usage": _usage(turn)}).encode()


def stream_events(turn: dict[str, Any], model: str, include_usage: bool) -> list[bytes]:
    """Turn ``turn``'s answer as chat completion chunks, each one SSE event."""
    base = {"id": f"chatcmpl-replay-{turn['turn']}", "object": "chat.completion.chunk", "created": 0, "model": model}

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**base, "choices": choices, **extra}).encode() + b"\n\n"

    text = turn["assistant"].get("text") or ""
    out = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    out += [event([{"index": 0, "delta": {"content": text[i:i + STREAM_PIECE_CHARS]}, "finish_reason": None}])
            for i in range(0, len(text), STREAM_PIECE_CHARS)]
    calls = _assistant_message(turn).get("tool_calls") or []
    out += [event([{"index": 0, "delta": {"tool_calls": [{"index": i, **call}]}, "finish_reason": None}])
            for i, call in enumerate(calls)]
    out.append(event([{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]))
    if include_usage:
        out.append(event([], usage=_usage(turn)))
    return [*out, b"data: [DONE]\n\n"]
