"""Wire tables: which renderer answers which endpoint, error bodies, routes, headers."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
from collections.abc import Callable
from typing import Any

from .chat import chat_body, chat_stream, completions_body, completions_stream
from .messages import ANTHROPIC_PING, messages_body, messages_stream
from .reply import Event, Reply, estimate_tokens
from .responses import responses_body, responses_stream
from .scenarios import MOCK_MODEL

BODIES: dict[str, Callable[[str, Reply, str, int], dict[str, Any]]] = {
    "chat": chat_body,
    "completions": completions_body,
    "responses": responses_body,
    "messages": messages_body,
}


def render_stream(wire: str, model: str, r: Reply, tok: str, now: int, include_usage: bool) -> list[Event]:
    if wire == "chat":
        return chat_stream(model, r, tok, now, include_usage)
    if wire == "completions":
        return completions_stream(model, r, tok, now, include_usage)
    if wire == "responses":
        return responses_stream(model, r, tok, now)
    return messages_stream(model, r, tok, now)


def heartbeat(wire: str) -> bytes:
    return ANTHROPIC_PING if wire == "messages" else b": ping\n\n"


def malformed(wire: str) -> bytes:
    event = {"responses": "response.output_text.delta", "messages": "content_block_delta"}.get(wire)
    head = f"event: {event}\n" if event else ""
    return f'{head}data: {{"type": "broken", "delta": tru\n\n'.encode()


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(wire: str | None, status: int, message: str, type_: str | None, code: str | None) -> dict[str, Any]:
    if wire in ("messages", "count_tokens"):
        default = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": type_ or default, "message": message}}
    if type_ is None:
        type_ = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    if code is None and status == 429:
        code = "rate_limit_exceeded"
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


ROUTES: dict[tuple[str, str], str] = {
    ("POST", "/chat/completions"): "chat",
    ("POST", "/completions"): "completions",
    ("POST", "/responses"): "responses",
    ("POST", "/messages"): "messages",
    ("POST", "/embeddings"): "embeddings",
    ("POST", "/messages/count_tokens"): "count_tokens",
    ("POST", "/responses/input_tokens"): "input_tokens",
    ("GET", "/models"): "models",
}

MODEL_OBJECT = {"id": MOCK_MODEL, "object": "model", "created": 0, "owned_by": "taskgate"}

BASE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-ratelimit-limit-requests", b"10000"),
    (b"x-ratelimit-remaining-requests", b"9999"),
    (b"x-ratelimit-limit-tokens", b"10000000"),
    (b"x-ratelimit-remaining-tokens", b"9999000"),
]
JSON_TYPE = (b"content-type", b"application/json")
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


def embedding(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for ``text``."""
    seed = hashlib.sha256(text.encode()).digest()
    raw = [(seed[i % 32] ^ (i * 37 & 0xFF)) / 127.5 - 1.0 for i in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def embedding_inputs(value: Any) -> list[str]:
    if isinstance(value, list) and value and not all(isinstance(v, int) for v in value):
        return [v if isinstance(v, str) else json.dumps(v) for v in value]
    return [value if isinstance(value, str) else json.dumps(value)]


def embeddings_body(body: dict[str, Any], n_bytes: int) -> dict[str, Any]:
    inputs = embedding_inputs(body.get("input", ""))
    dims = body.get("dimensions")
    dims = dims if isinstance(dims, int) and 0 < dims <= 4096 else 8
    as_base64 = body.get("encoding_format") == "base64"
    data = []
    for i, text in enumerate(inputs):
        vec = embedding(text, dims)
        value: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if as_base64 else vec
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = estimate_tokens(n_bytes)
    model = body.get("model") if isinstance(body.get("model"), str) else MOCK_MODEL
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

