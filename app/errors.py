"""Errors the gateway itself answers with, rendered in the caller's wire format.

OpenAI endpoints get ``{"error": {"message", "type", "code", "param"}}``; Anthropic
``/v1/messages`` gets ``{"type": "error", "error": {"type", "message"}}`` (see
:meth:`app.wire.base.WireFormat.error_body`). Messages never contain a key or a token.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from app.db.errors import database_unreachable, server_gone
from app.db.fair_pool import expire_all
from app.fault_log import faults

if TYPE_CHECKING:
    from app.wire.base import WireFormat


@dataclass
class GatewayError(Exception):
    """A request the gateway answers itself instead of forwarding.

    ``status`` is the HTTP status; ``type`` and ``code`` the OpenAI ``error.type`` and
    ``error.code`` (``code`` doubles as the stop reason for ``task_stopped``).
    ``headers`` are added to the response (refusals carry ``x-should-retry: false`` so
    the openai and anthropic SDKs do not retry them).
    """

    status: int
    type: str
    code: str | None
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.type}/{self.code}: {self.message}"


#: Status of the stop refusal on OpenAI endpoints (Anthropic's is its adapter's,
#: :data:`app.wire.anthropic_messages.TASK_STOPPED_STATUS`). 400 is the one status every
#: OpenAI client family treats as final: the openai SDKs, LangChain, Pydantic AI and
#: smolagents retry no 4xx but 408/409/429 (and honour ``x-should-retry``), the Vercel AI
#: SDK (opencode) retries 408/409/429, Codex CLI retries every 4xx but 400 five times, and
#: litellm maps only 400 (BadRequestError), 401 and 404 to errors its callers treat as final
#: (a 403 becomes a generic APIError, which Aider retries with back-off). The request is
#: refused for the client's own state (its task is stopped) and must not be repeated; the
#: message says so, ``type`` is ``task_stopped`` and ``code`` the stop reason. An exhausted
#: budget is refused with the same status on every endpoint (Anthropic's included, where 400
#: is what a spent credit balance gets; a 403 reads "Failed to authenticate" in Claude Code).
STOP_STATUS = 400


def task_stopped(task_id: str, reason: str, counters: str, why: str | None = None) -> GatewayError:
    """The refusal (:data:`STOP_STATUS`) for a task whose stop latch is set (or is being
    set by this request).

    ``why`` is an optional sentence explaining the reason (e.g. which tool looped)."""
    because = f": {why}" if why else ""
    return GatewayError(
        STOP_STATUS,
        "task_stopped",
        reason,
        f"Task '{task_id}' is stopped ({reason}{because}). Counters: {counters}. "
        "No request of this task will be forwarded until an operator resumes it.",
        {"x-should-retry": "false"},
    )


def wire_status(fmt: WireFormat, err: GatewayError) -> int:
    """The HTTP status ``err`` is answered with in the wire format ``fmt``
    (:meth:`app.wire.base.WireFormat.refusal`: a stopped task is 409 on Anthropic)."""
    return fmt.refusal(err.status, err.type)[0]


#: Headers that end the client's connection after the answer: a client that sends an
#: unknown token or a path taskgate does not proxy has its body left unread.
CLOSE = {"connection": "close"}


def unauthorized(message: str, *, close: bool = False) -> GatewayError:
    """401 ``invalid_api_key`` (code ``invalid_task_token``), not to be retried; with
    ``close``, the connection is closed after it (the body was not read)."""
    return GatewayError(401, "invalid_api_key", "invalid_task_token", message,
                        {"x-should-retry": "false", **(CLOSE if close else {})})


#: ``retry-after`` (seconds) of a 503 ``database_unavailable``: a failover of a highly
#: available PostgreSQL takes a few seconds (docs/scaling.md, "High availability").
UNAVAILABLE_RETRY_AFTER_S = 1


def unavailable(message: str = "taskgate cannot reach its database; the request was not forwarded.") -> GatewayError:
    """503 when admission cannot run: the gateway fails closed. Nothing was counted, so
    the client may retry (``retry-after``, ``x-should-retry: true``)."""
    return GatewayError(503, "gateway_unavailable", "database_unavailable", message,
                        {"retry-after": str(UNAVAILABLE_RETRY_AFTER_S), "x-should-retry": "true"})


@contextmanager
def fail_closed(what: str) -> Iterator[None]:
    """Around database work a request depends on: when the database cannot be reached
    the request is refused with 503 :func:`unavailable` (one rate-limited log line per
    ``what``, :data:`app.fault_log.faults`). A :class:`GatewayError` and any other error
    propagate unchanged (a bug: 500 with a request id)."""
    try:
        yield
    except GatewayError:
        raise
    except Exception as exc:  # fail closed while the database is out of reach
        if not database_unreachable(exc):
            raise
        if server_gone(exc):  # a failover: no pooled connection to that server is worth keeping
            expire_all()
        faults.report(what, "database unavailable; refusing requests (503, fail closed)", exc)
        raise unavailable() from None


def render_error(fmt: WireFormat, err: GatewayError) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """JSON body and raw headers for a gateway error in ``fmt``'s shape (its
    ``error.type`` from :meth:`app.wire.base.WireFormat.refusal`)."""
    etype = fmt.refusal(err.status, err.type)[1]
    body = json.dumps(fmt.error_body(err.message, etype, err.code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in err.headers.items()]
    return body, headers
