"""The one error shape of the admin API (and of every non-``/v1`` path).

Every error answers ``{"error": {"type", "code", "message", "param", "request_id"}}``:

- ``type``: ``invalid_request_error`` (400, 404, 405, 409, 413, 422), ``authentication_error``
  (401), ``gateway_unavailable`` (503), ``internal_error`` (500).
- ``code``: a stable machine-readable code (``invalid_json``, ``validation_error``,
  ``unauthorized``, ``task_not_found``, ``task_exists``, ``task_not_stopped``,
  ``database_unavailable``, ``internal_error``, ...).
- ``message``: a sentence for people; never holds a secret or the raw input.
- ``param``: the offending field or parameter as a dotted path (``loop_guard.identical_streak``,
  ``query.after``), else ``null``.
- ``request_id``: set on 500s (also sent as ``x-request-id``) so the log line can be found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.routing import BaseRoute, Match

_TYPES = {401: "authentication_error", 500: "internal_error", 503: "gateway_unavailable"}
_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "request_too_large", 422: "validation_error"}


class ErrorDetail(BaseModel):
    type: str = Field(..., description="invalid_request_error, authentication_error, "
                      "gateway_unavailable or internal_error.")
    code: str = Field(..., description="Stable code, e.g. validation_error, task_not_found.")
    message: str = Field(..., description="What went wrong, for people.")
    param: str | None = Field(None, description="Offending field or parameter (dotted path).")
    request_id: str | None = Field(None, description="Set on 500s; find it in the gateway's log.")


class ErrorBody(BaseModel):
    """Every admin API error."""

    error: ErrorDetail


class AdminError(Exception):
    """An admin API error with a status, a code and a message (and the field at fault)."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param
        self.headers = headers


def error_response(status: int, message: str, *, code: str | None = None, param: str | None = None,
                   request_id: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """Render one admin error."""
    detail = ErrorDetail(type=_TYPES.get(status, "invalid_request_error"),
                         code=code or _CODES.get(status, "error"), message=message, param=param,
                         request_id=request_id)
    headers = dict(headers or {})
    if request_id:
        headers["x-request-id"] = request_id
    return JSONResponse({"error": detail.model_dump()}, status_code=status, headers=headers or None)


def _dotted(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def validation_response(exc: RequestValidationError) -> JSONResponse:
    """400 ``invalid_json`` for a body that is not JSON; else 422 ``validation_error``
    naming each field at fault (never echoing the input, which may hold secrets)."""
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(400, "Request body is not valid JSON.", code="invalid_json", param="body")
    parts = [f"{_dotted(tuple(e.get('loc', ())))}: {e.get('msg', 'invalid')}" for e in errors[:10]]
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    first = _dotted(tuple(errors[0].get("loc", ()))) if errors else None
    return error_response(422, "; ".join(parts) + more, code="validation_error", param=first)


def allow_header(routes: Sequence[BaseRoute], scope: dict[str, Any]) -> str:
    """The ``Allow`` header of a 405: every method some route serves at this path
    (Starlette names only the first matching route's)."""
    return ", ".join(m for m in ("GET", "POST", "PUT", "PATCH", "DELETE")
                     if any(r.matches({**scope, "method": m})[0] is Match.FULL for r in routes))


def _response(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


#: OpenAPI ``responses`` for admin routes (status → description); see :func:`responses`.
DESCRIPTIONS = {
    400: "Request body is not valid JSON (invalid_json).",
    401: "Missing or wrong admin token (unauthorized).",
    404: "No such task, budget or key (task_not_found, budget_not_found, key_not_found).",
    409: "Conflict (task_exists, task_not_stopped, budget_exists, budget_not_empty, budget_too_deep).",
    422: "A field, path or query parameter is invalid (validation_error; param names it).",
    500: "Internal error (internal_error; request_id names the log line).",
    503: "The database cannot be reached (database_unavailable).",
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for a route: 401, 422, 500 and 503 always, plus ``statuses``."""
    wanted = sorted({401, 422, 500, 503, *statuses})
    return {status: _response(DESCRIPTIONS[status]) for status in wanted}
