"""JSON-RPC 2.0 as MCP's streamable HTTP transport carries it: one message per POST body,
answered by ``application/json`` (one response) or ``text/event-stream`` (SSE events, one
of them the response). Pure: bytes in, values out, no I/O.

- :func:`parse_message` reads a client's POST body: a request (``method`` and ``id``), a
  notification (``method``, no ``id``) or a response to a server request (``result`` or
  ``error``). A batch (a JSON array: removed from MCP in revision 2025-06-18) and anything
  that is not one JSON-RPC 2.0 object is :class:`InvalidMessage` (HTTP 400).
- :func:`header_mismatch`: revision 2026-07-28 repeats the method and the tool's name in
  ``Mcp-Method`` / ``Mcp-Name``; a header that disagrees with the body is refused, so a
  proxy or policy reading the headers sees what the server will run.
- :func:`find_response` picks the response with a given id out of a server's answer,
  either shape; :func:`tool_result_text` is what the loop guard fingerprints of a
  ``tools/call`` response.
- :func:`error_body`: a JSON-RPC error response (refusals, unreachable servers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from app.guard.fingerprint import canonical_json

#: JSON-RPC ids are strings or numbers (``null`` only in an error about an unreadable request).
JsonRpcId = str | int | float | None
JsonObject = dict[str, object]

#: A request the gateway refused (the task is stopped, a ceiling was reached).
TASK_STOPPED = -32001
#: The upstream MCP server could not be reached, failed, or did not answer in time.
SERVER_UNAVAILABLE = -32002
#: JSON-RPC 2.0's own codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

#: ``_meta`` keys are the transport's (server info, protocol version), not the tool's result.
_META = "_meta"


class InvalidMessage(ValueError):
    """A POST body that is not one JSON-RPC 2.0 message; the message says why, and
    :attr:`code` is the JSON-RPC error code to answer with."""

    def __init__(self, message: str, code: int = INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Message:
    """One client message: ``method`` (``None`` for a response), ``id`` (``None`` for a
    notification) and ``params`` (``{}`` when absent)."""

    method: str | None
    id: JsonRpcId
    params: JsonObject = field(default_factory=dict)
    has_id: bool = False

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.has_id

    @property
    def tool_name(self) -> str | None:
        """The tool a ``tools/call`` names (``None``: another method, or no name)."""
        name = self.params.get("name")
        return name if self.method == "tools/call" and isinstance(name, str) else None

    @property
    def tool_arguments(self) -> object:
        """The arguments of a ``tools/call`` (``{}`` when absent)."""
        arguments = self.params.get("arguments")
        return {} if arguments is None else arguments


def parse_message(body: bytes) -> Message:
    """The JSON-RPC message in a POST body. Raises :class:`InvalidMessage` for invalid
    JSON (``-32700``), a batch or anything that is not a JSON-RPC 2.0 object (``-32600``)."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidMessage("The body is not JSON.", PARSE_ERROR) from None
    if isinstance(value, list):
        raise InvalidMessage("JSON-RPC batches are not part of MCP (removed in 2025-06-18): send one message.")
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise InvalidMessage('The body is not a JSON-RPC 2.0 message (an object with "jsonrpc": "2.0").')
    has_id = "id" in value
    message_id = value.get("id")
    if has_id and (not isinstance(message_id, (str, int, float)) or isinstance(message_id, bool)):
        raise InvalidMessage("A JSON-RPC id is a string or a number (MCP: never null).")
    method = value.get("method")
    params = value.get("params", {})
    if method is None:
        if not has_id or ("result" not in value and "error" not in value):
            raise InvalidMessage('A JSON-RPC message has a "method", or is a response with a "result" or "error".')
        return Message(None, message_id, {}, has_id)
    if not isinstance(method, str) or not method:
        raise InvalidMessage('"method" is a non-empty string.')
    if not isinstance(params, dict):
        raise InvalidMessage('"params" is an object.')
    if method == "tools/call" and not isinstance(params.get("name"), str):
        raise InvalidMessage('A "tools/call" names its tool: "params": {"name": "...", "arguments": {...}}.')
    return Message(method, message_id, params, has_id)


def header_mismatch(message: Message, headers: Mapping[str, str]) -> str | None:
    """Why the ``Mcp-Method`` / ``Mcp-Name`` headers (lower-case keys) disagree with the
    body, or ``None`` when they agree or are absent."""
    method = headers.get("mcp-method")
    if method is not None and method != message.method:
        return f"The Mcp-Method header ({method!r}) is not the body's method ({message.method!r})."
    name = headers.get("mcp-name")
    if name is not None and message.method == "tools/call" and name != message.tool_name:
        return f"The Mcp-Name header ({name!r}) is not the tool the body calls ({message.tool_name!r})."
    return None


def error_body(message_id: JsonRpcId, code: int, text: str, data: Mapping[str, object] | None = None) -> bytes:
    """A JSON-RPC 2.0 error response, serialised."""
    error: JsonObject = {"code": code, "message": text}
    if data is not None:
        error["data"] = dict(data)
    return orjson.dumps({"jsonrpc": "2.0", "id": message_id, "error": error})


def _sse_data(body: bytes) -> list[bytes]:
    """The ``data`` of each SSE event in ``body`` (multi-line data joined by ``\\n``)."""
    events: list[bytes] = []
    lines: list[bytes] = []
    for line in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if not line:
            if lines:
                events.append(b"\n".join(lines))
                lines = []
        elif line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if lines:
        events.append(b"\n".join(lines))
    return events


def find_response(body: bytes, content_type: str, message_id: JsonRpcId) -> JsonObject | None:
    """The JSON-RPC response to ``message_id`` in a server's answer (``application/json``
    or ``text/event-stream``), or ``None`` when it holds none."""
    documents = _sse_data(body) if content_type.startswith("text/event-stream") else [body]
    for document in documents:
        try:
            value = orjson.loads(document)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("id") == message_id and ("result" in value or "error" in value):
            return value
    return None


def tool_result_text(response: Mapping[str, object]) -> tuple[str, bool]:
    """(text, is_error) of a ``tools/call`` response: the canonical JSON of its result
    without ``_meta`` (the transport's), or of its JSON-RPC error; ``is_error`` for an
    error or ``"isError": true``."""
    result = response.get("result")
    if isinstance(result, dict):
        kept = {k: v for k, v in result.items() if k != _META}
        return canonical_json(kept), result.get("isError") is True
    return canonical_json(response.get("error")), True
