"""Rewrite the top-level ``model`` of a JSON request body, and nothing else.

An alias (``models[].upstream_model`` in the configuration) changes which model upstream
runs; every other byte of the body stays as the client sent it (key order, spacing,
escapes, numbers), so the forwarded request is the client's request. Pure.
"""

from __future__ import annotations

import json

_WS = b" \t\r\n"


def _skip_ws(body: bytes, i: int) -> int:
    while i < len(body) and body[i] in _WS:
        i += 1
    return i


def _string_end(body: bytes, i: int) -> int:
    """Index just past the JSON string starting at ``body[i] == '"'``."""
    i += 1
    while True:
        quote = body.index(b'"', i)
        backslashes = 0
        j = quote - 1
        while body[j] == 0x5C:  # backslash
            backslashes += 1
            j -= 1
        if backslashes % 2 == 0:
            return quote + 1
        i = quote + 1


def _value_end(body: bytes, i: int) -> int:
    """Index just past the JSON value starting at ``body[i]``."""
    if body[i] == 0x22:  # string
        return _string_end(body, i)
    if body[i] in b"{[":
        depth = 0
        while True:
            c = body[i]
            if c == 0x22:
                i = _string_end(body, i)
                continue
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    while i < len(body) and body[i] not in b",}] \t\r\n":  # number, true, false, null
        i += 1
    return i


def model_value_spans(body: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` byte spans of every top-level ``"model"`` member's value.

    ``body`` must be a JSON object (the caller parsed it already); raises ``ValueError``
    when it is not one."""
    i = _skip_ws(body, 0)
    if i >= len(body) or body[i] != 0x7B:
        raise ValueError("not a JSON object")
    spans: list[tuple[int, int]] = []
    i += 1
    while True:
        i = _skip_ws(body, i)
        if body[i] == 0x7D:  # }
            return spans
        key_end = _string_end(body, i)
        key = json.loads(body[i:key_end])
        i = _skip_ws(body, key_end)  # at ':'
        start = _skip_ws(body, i + 1)
        end = _value_end(body, start)
        if key == "model":
            spans.append((start, end))
        i = _skip_ws(body, end)
        if body[i] == 0x2C:  # ,
            i += 1


def rewrite_model(body: bytes, model: str) -> bytes:
    """``body`` with the value of each top-level ``model`` replaced by ``model`` (a JSON
    string); every other byte unchanged. A body without ``model`` is returned as is."""
    replacement = json.dumps(model).encode()
    out = bytearray()
    last = 0
    for start, end in model_value_spans(body):
        out += body[last:start] + replacement
        last = end
    return bytes(out + body[last:]) if last else body
