"""Admin REST API under ``/admin`` (Bearer ``TASKGATE_ADMIN_TOKEN``).

Create tasks and get their tokens, change limits, stop and resume tasks, and read
why a task stopped (``stop_reason``, ``stop_detail``, the event history and the
tool-call ledger). Every change that matters is a row in ``task_events``.
Errors (one shape, :mod:`app.admin.errors`): 400 body not JSON, 401 bad admin token,
404 unknown task, 409 duplicate task id or task not stopped, 422 invalid body, path or
query parameter, 500 internal error (with a request id), 503 database unreachable.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from app.admin import schemas
from app.admin.auth import require_admin
from app.admin.errors import AdminError, responses
from app.admission.refusals import event_message, stop_message
from app.admission.tokens import new_token, token_hash
from app.budgets.thresholds import thresholds_of
from app.db import sql
from app.db import tasks as task_rows
from app.db.bounds import INT8_MAX
from app.db.pool import durable
from app.db.sql import assemble
from app.guard.detector import CallRecord, detect
from app.guard.policy import Policy
from app.request_ids import REQUEST_ID
from app.task import Task

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)])

#: ``{task_id}`` in paths: a task id as ``POST /admin/tasks`` accepts it (422 otherwise).
TaskIdPath = Annotated[str, Path(pattern=schemas.TASK_ID_PATTERN, description="The task's id.")]
#: ``?after=`` of the event and ledger pages: a row id / sequence number (bigint).
AfterSeq = Annotated[int, Query(ge=0, le=INT8_MAX, description="Return rows after this id.")]

_INSERT_COLUMNS = ("id", "token_hash", "request_limit", "max_duration_s", "token_limit", "tool_call_limit",
                   "max_stalls", "stream_idle_timeout_s", "stream_first_event_timeout_s", "loop_guard",
                   "metadata", "cost_limit_usd", "allowed_models", "conversation_request_limit",
                   "conversation_tool_call_limit", "conversation_max_duration_s", "upstream_timeout_s",
                   "cost_wait_s", "default_max_output_tokens", "budget_id", "thresholds")
_INSERT = sql.statement("admin_task_insert")
_GET = sql.statement("admin_task_get")
_LIST = sql.statement("admin_task_list")
_EVENTS = sql.statement("admin_task_events")
_CALLS = sql.statement("admin_task_calls")
_CLEAR = sql.statement("admin_task_clear")

#: Columns PATCH may change.
_PATCHABLE = ("request_limit", "max_duration_s", "token_limit", "tool_call_limit", "max_stalls",
              "stream_idle_timeout_s", "stream_first_event_timeout_s", "loop_guard", "metadata",
              "cost_limit_usd", "allowed_models", "conversation_request_limit", "conversation_tool_call_limit",
              "conversation_max_duration_s", "upstream_timeout_s", "cost_wait_s",
              "default_max_output_tokens", "thresholds")


def _column_value(column: str, value: Any) -> Any:
    """A request value as its column takes it: dollars as exact decimals."""
    return Decimal(str(value)) if column == "cost_limit_usd" and value is not None else value


def _json_value(value: Any) -> Any:
    """A column value for an event's JSON detail (decimals as numbers)."""
    return float(value) if isinstance(value, Decimal) else value


def _task(row: Mapping[str, Any]) -> schemas.Task:
    """The admin API's view of a ``tasks`` row: its columns, ``total_tokens`` and
    ``stop_message``."""
    d = dict(row)
    d["total_tokens"] = d["input_tokens"] + d["output_tokens"]
    d["stop_message"] = stop_message(Task.from_row(row))
    d["budget"] = d.get("budget_id")
    d["thresholds"] = list(thresholds_of(d.get("thresholds")))
    return schemas.Task.model_validate(d)


def _not_found(task_id: str) -> AdminError:
    return AdminError(404, "task_not_found", f"No task with id '{task_id}'.", "task_id")


@router.post("/tasks", status_code=201, response_model=schemas.TaskCreated,
             responses=responses(400, 404, 409))
async def create_task(body: schemas.TaskCreate, request: Request) -> schemas.TaskCreated:
    """Create a task and return it with its token (the only time the token is shown)."""
    settings = request.app.state.settings
    token = new_token()
    values = body.model_dump(exclude={"loop_guard"})
    values["id"] = body.id or "task_" + secrets.token_hex(8)
    values["token_hash"] = token_hash(token)
    values["budget_id"] = values.pop("budget")
    if values["request_limit"] is None:
        values["request_limit"] = settings.default_request_limit
    values["loop_guard"] = body.loop_guard.model_dump(exclude_none=True) if body.loop_guard else {}
    try:
        async with request.app.state.db.acquire() as conn, conn.transaction():
            await durable(conn)
            row = await conn.fetchrow(_INSERT, *(_column_value(c, values[c]) for c in _INSERT_COLUMNS))
            await task_rows.add_event(conn, values["id"], "created", None,
                                      {k: v for k, v in values.items() if k not in ("token_hash", "id")},
                                      request_id=REQUEST_ID.get())
    except asyncpg.UniqueViolationError:
        raise AdminError(409, "task_exists", f"A task with id '{values['id']}' already exists.",
                         "id") from None
    except asyncpg.ForeignKeyViolationError:
        raise AdminError(404, "budget_not_found", f"No budget with id '{values['budget_id']}'.",
                         "budget") from None
    return schemas.TaskCreated(**_task(row).model_dump(), token=token)


@router.get("/tasks", response_model=schemas.TaskList, responses=responses())
async def list_tasks(request: Request, status: Literal["active", "stopped"] | None = None,
                     limit: int = Query(100, ge=1, le=1000),
                     after: str | None = Query(None, pattern=schemas.TASK_ID_PATTERN,
                                               description="A task id: list tasks after it."),
                     budget: str | None = Query(None, pattern=schemas.TASK_ID_PATTERN,
                                                description="Only the tasks drawing from this budget.")
                     ) -> schemas.TaskList:
    """Tasks ordered by id, ``limit`` per page; filter by ``status`` and ``budget``; page
    with ``after``."""
    rows = await request.app.state.db.fetch(_LIST, status, after, limit + 1, budget)
    page = [_task(r) for r in rows[:limit]]
    has_more = len(rows) > limit
    return schemas.TaskList(data=page, has_more=has_more,
                            next_after=page[-1].id if has_more and page else None)


@router.get("/tasks/{task_id}", response_model=schemas.Task, responses=responses(404))
async def get_task(task_id: TaskIdPath, request: Request) -> schemas.Task:
    async with request.app.state.db.acquire() as conn:
        row = await conn.fetchrow(_GET, task_id)
        if row is None:
            raise _not_found(task_id)
        crossed = await conn.fetch(sql.statement("task_warnings_of"), task_id)
    task = _task(row)
    task.warnings = [schemas.TaskCrossing(limit=w["limit_name"], threshold=w["threshold"],
                                          crossed_at=w["crossed_at"]) for w in crossed]
    return task


@router.patch("/tasks/{task_id}", response_model=schemas.Task, responses=responses(400, 404))
async def update_task(task_id: TaskIdPath, body: schemas.TaskPatch, request: Request) -> schemas.Task:
    """Change limits (only the fields given; ``null`` removes a limit). Never clears a
    stop latch: a task stopped at its limit stays stopped until ``/resume``."""
    changes = {k: getattr(body, k) for k in body.model_fields_set if k in _PATCHABLE}
    if "loop_guard" in changes:
        changes["loop_guard"] = body.loop_guard.model_dump(exclude_none=True) if body.loop_guard else {}
    if "metadata" in changes and changes["metadata"] is None:
        changes["metadata"] = {}
    async with request.app.state.db.acquire() as conn, conn.transaction():
        task = await task_rows.lock_task(conn, task_id=task_id)
        if task is None:
            raise _not_found(task_id)
        if not changes:
            return _task(await conn.fetchrow(_GET, task_id))
        await durable(conn)
        columns = list(changes)  # names from _PATCHABLE only, never from the request
        patch = assemble.fill("admin_task_patch", sets=assemble.assignments(columns, _PATCHABLE))
        row = await conn.fetchrow(patch, task_id, *(_column_value(c, changes[c]) for c in columns))
        await task_rows.add_event(conn, task_id, "limits_changed", None, {
            "before": {k: _json_value(task.column(k)) for k in changes}, "after": changes},
            request_id=REQUEST_ID.get())
    return _task(row)


@router.post("/tasks/{task_id}/stop", response_model=schemas.Task, responses=responses(400, 404))
async def stop_task(task_id: TaskIdPath, request: Request,
                    body: Annotated[schemas.StopRequest | None, Body()] = None) -> schemas.Task:
    """Set the stop latch by hand (the body is optional). Stopping a stopped task
    changes nothing."""
    body = body or schemas.StopRequest()
    async with request.app.state.db.acquire() as conn, conn.transaction():
        task = await task_rows.lock_task(conn, task_id=task_id)
        if task is None:
            raise _not_found(task_id)
        await task_rows.set_latch(conn, task_id, body.reason,
                                  {"by": "operator", "message": body.message}, request_id=REQUEST_ID.get())
        row = await conn.fetchrow(_GET, task_id)
    return _task(row)


@router.post("/tasks/{task_id}/resume", response_model=schemas.Task,
             responses=responses(400, 404, 409))
async def resume_task(task_id: TaskIdPath, body: schemas.ResumeRequest, request: Request) -> schemas.Task:
    """Clear the stop latch (the only way to), with the operator's reason in the history.

    Counters are kept: a task stopped by ``request_limit`` needs a higher limit
    (``PATCH``) or it stops again at its next request.
    """
    async with request.app.state.db.acquire() as conn, conn.transaction():
        task = await task_rows.lock_task(conn, task_id=task_id)
        if task is None:
            raise _not_found(task_id)
        if task.status != "stopped":
            raise AdminError(409, "task_not_stopped", f"Task '{task_id}' is not stopped.")
        await durable(conn)
        row = await conn.fetchrow(_CLEAR, task_id)
        await task_rows.add_event(conn, task_id, "resumed", body.reason, {
            "previous_stop_reason": task.stop_reason, "previous_stop_detail": task.stop_detail,
            "admitted_requests": task.admitted_requests, "request_limit": task.request_limit},
            request_id=REQUEST_ID.get())
    return _task(row)


@router.get("/tasks/{task_id}/events", response_model=schemas.TaskEventList, responses=responses(404))
async def task_events(task_id: TaskIdPath, request: Request, after: AfterSeq = 0,
                      limit: int = Query(500, ge=1, le=5000)) -> schemas.TaskEventList:
    """The task's durable history, oldest first: created, stopped, resumed,
    limits_changed, task_warning, loop_warning, stream_stalled, stream_truncated, upstream_*."""
    async with request.app.state.db.acquire() as conn:
        if await conn.fetchrow(_GET, task_id) is None:
            raise _not_found(task_id)
        rows = await conn.fetch(_EVENTS, task_id, after, limit)
    return schemas.TaskEventList(data=[schemas.TaskEvent.model_validate(
        {**dict(r), "message": event_message(r["kind"], r["reason"], r["detail"])}) for r in rows])


@router.get("/tasks/{task_id}/tool-calls", response_model=schemas.ToolCallList,
            responses=responses(404))
async def task_tool_calls(task_id: TaskIdPath, request: Request, after: AfterSeq = 0,
                          limit: int = Query(1000, ge=1, le=10000)) -> schemas.ToolCallList:
    """The loop guard's ledger for a task (names, hashes, flags; never raw arguments or
    results), and per conversation the detector's current verdict on its streaks."""
    settings = request.app.state.settings
    async with request.app.state.db.acquire() as conn:
        task = await conn.fetchrow(_GET, task_id)
        if task is None:
            raise _not_found(task_id)
        rows = await conn.fetch(_CALLS, task_id, after, limit + 1)
    page = rows[:limit]
    by_conversation: dict[str, list[CallRecord]] = defaultdict(list)
    for r in page:
        by_conversation[r["conversation_key"]].append(
            CallRecord(r["call_id"], r["tool_name"], r["arguments_hash"], r["result_hash"], r["is_error"],
                       r["is_empty"]))
    thresholds = Policy(Task.from_row(task), settings).thresholds
    conversations = []
    for key, history in by_conversation.items():
        v = detect(history, thresholds)
        conversations.append(schemas.ConversationState(
            conversation_key=key, tool_calls=len(history), verdict=v.action.name.lower(),
            reason=v.reason, count=v.count, detail=dict(v.detail)))
    return schemas.ToolCallList(data=[schemas.ToolCallRow.model_validate(dict(r)) for r in page],
                                conversations=conversations, has_more=len(rows) > limit)


@router.delete("/tasks/{task_id}", status_code=204, response_class=Response, responses=responses(404))
async def delete_task(task_id: TaskIdPath, request: Request) -> Response:
    """Delete a task, its history and its ledger. Its token stops working at once."""
    async with request.app.state.db.acquire() as conn, conn.transaction():
        await durable(conn)
        result = await conn.execute(sql.statement("admin_task_delete"), task_id)
    if result == "DELETE 0":
        raise _not_found(task_id)
    return Response(status_code=204)


from app.admin.stats import router as _stats_router  # noqa: E402 - its routes share this router's prefix and auth

router.include_router(_stats_router)
from app.admin.spend import router as _spend_router  # noqa: E402 - as the stats routes

router.include_router(_spend_router)
