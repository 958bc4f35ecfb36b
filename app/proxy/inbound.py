"""Everything the client sent, checked before admission.

A request the gateway refuses is never counted, so every check that client input can
fail runs before the reservation: the task token from the headers, header names and
values (forwarded as sent, so they must be valid HTTP field values, and UTF-8: the
upstream transport re-encodes header text as UTF-8, which would garble other bytes),
the body's size and arrival time, and its JSON. Each failure is a
:class:`app.errors.GatewayError` with a 4xx status; those raised before the body has
been read in full carry ``connection: close`` (the server would otherwise keep reading
a body nobody wants).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, AsyncIterator

from starlette.requests import ClientDisconnect

from app.errors import CLOSE, GatewayError, unauthorized
from app.wire import json_text

#: RFC 9110 §5.1 field name (token) and §5.5 field value (visible characters and
#: obs-text, inner spaces and tabs), the grammar h11 enforces on what we forward.
_FIELD_NAME = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")

def token_from_headers(headers: dict[str, str]) -> str:
    """The task token: ``Authorization: Bearer <token>`` or ``x-api-key: <token>``.
    Raises 401 when neither holds one."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    if headers.get("x-api-key", "").strip():
        return headers["x-api-key"].strip()
    raise unauthorized("Missing task token: send it as 'Authorization: Bearer <task token>' "
                       "or 'x-api-key: <task token>'.", close=True)


def check_headers(raw: list[tuple[bytes, bytes]]) -> None:
    """Raise 400 ``invalid_header`` when a header name is not an RFC 9110 token, or a
    value holds a control character (NUL, CR, LF, DEL...), leading/trailing space, or
    bytes that are not UTF-8 (e.g. ``\xff\xfe``)."""
    for name, value in raw:
        if (not _FIELD_NAME.fullmatch(name) or not _FIELD_VALUE.fullmatch(value)
                or not (value.isascii() or _utf8(value))):
            shown = name.decode("latin-1")[:64].encode("unicode_escape").decode()
            raise GatewayError(400, "invalid_request_error", "invalid_header",
                               f"Header {shown!r} is not a valid HTTP header. Nothing was "
                               "forwarded or counted.", dict(CLOSE))


def _utf8(value: bytes) -> bool:
    if value.isascii():
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def read_body(chunks: AsyncIterator[bytes], declared: str | None, max_bytes: int,
                    deadline_s: float | None) -> bytes:
    """The whole request body from ``chunks`` (``request.stream()``).

    Raises 413 ``request_too_large`` above ``max_bytes`` (declared or received), 408
    ``request_timeout`` when the body has not arrived in full within ``deadline_s``
    seconds (one deadline for the whole body, not per read; ``None`` or 0: no bound),
    400 ``client_disconnected`` when the client leaves first.
    """
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large(max_bytes)
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(deadline_s or None):
            async for part in chunks:
                size += len(part)
                if size > max_bytes:
                    raise too_large(max_bytes)
                parts.append(part)
    except TimeoutError:
        raise GatewayError(408, "invalid_request_error", "request_timeout",
                           f"The request body did not arrive within {deadline_s:g} s "
                           "(TASKGATE_BODY_TIMEOUT_S). Nothing was forwarded or counted.",
                           dict(CLOSE)) from None
    except ClientDisconnect:  # nobody is left to read the answer; no traceback in the log
        raise GatewayError(400, "invalid_request_error", "client_disconnected",
                           "The client closed the connection before sending its whole body.",
                           dict(CLOSE)) from None
    return b"".join(parts)


def too_large(max_bytes: int) -> GatewayError:
    return GatewayError(413, "invalid_request_error", "request_too_large",
                        f"Request body exceeds taskgate's limit of {max_bytes} bytes "
                        "(TASKGATE_MAX_BODY_BYTES). Nothing was forwarded or counted.", dict(CLOSE))


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object. Raises 400 ``invalid_json`` for anything else:
    invalid UTF-8, bad syntax, nesting too deep for the parser, integers over the
    interpreter's digit limit, a top level that is not an object. Parsed as
    :func:`json.loads` parses it (:func:`app.wire.json_text.loads_request`: the same value
    and errors, 3-8× faster on an agent's history)."""
    try:
        payload = json_text.loads_request(body)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise GatewayError(400, "invalid_request_error", "invalid_json",
                           f"Request body is not valid JSON ({reason}). Nothing was forwarded "
                           "or counted.") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "invalid_request_error", "invalid_json",
                           "Request body must be a JSON object. Nothing was forwarded or counted.")
    return payload
