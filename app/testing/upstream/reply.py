"""The reply model (text and tool calls) and the SSE helpers every renderer shares."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

CONTENT, DATA, HEARTBEAT, TERMINAL = "content", "data", "heartbeat", "terminal"
Event = tuple[str, bytes]  # (kind, SSE bytes)
"""One SSE event as sent: its kind (content, data, heartbeat, terminal) and its bytes."""

PLACEHOLDER = "@@taskgate-token@@"
PLACEHOLDER_B = PLACEHOLDER.encode()



@dataclass(frozen=True, slots=True)
class Call:
    name: str
    arguments: str  # JSON text, as OpenAI formats carry it

    def input(self) -> Any:
        """The arguments as an object, as Anthropic ``tool_use.input`` carries it."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return {}


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    calls: tuple[Call, ...]
    chunks: int
    input_tokens: int
    output_tokens: int


def arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"))


def split_text(text: str, n: int) -> list[str]:
    """``text`` in at most ``n`` non-empty pieces of near-equal size."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def estimate_tokens(n_bytes: int) -> int:
    return max(1, n_bytes // 4)


def sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()

