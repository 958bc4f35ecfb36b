"""``/admin/budgets``: fleet budgets and their keys (Bearer ``TASKGATE_ADMIN_TOKEN``).

Create a budget (optionally nested in a parent, depth <= 4), read it with its spend in
the current window and the windows before, list, change its limits, delete it once no
task draws from it and no budget nests in it; create, list and revoke its budget keys
(:mod:`app.budgets.keys`); pause a budget (the kill switch: every task under it refused,
their open requests cut in every gateway process; :mod:`app.budgets.pause`), resume it,
and read its history. Errors in the admin API's one shape (:mod:`app.admin.errors`):
404 ``budget_not_found`` / ``key_not_found``, 409 ``budget_exists`` / ``budget_not_empty``,
409 ``budget_too_deep`` / ``budget_not_paused``, 422 invalid fields (with a sentence: a rate
of 0, a bad model glob, :mod:`app.admin.budget_schemas`).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.admin import budget_schemas as schemas
from app.admin.auth import require_admin
from app.admin.errors import AdminError, responses
from app.admin.routes import AfterSeq
from app.admission.tokens import token_hash
from app.budgets import keys as budget_keys
from app.budgets import pause, rates, thresholds, windows
from app.db import sql
from app.db.pool import durable
from app.db.sql import assemble

router = APIRouter(prefix="/admin", tags=["budgets"], dependencies=[Depends(require_admin)])

BudgetIdPath = Annotated[str, Path(pattern=schemas.BUDGET_ID_PATTERN, description="The budget's id.")]
KeyIdPath = Annotated[str, Path(pattern=schemas.KEY_ID_PATTERN, description="The key's id.")]

_COLUMNS = ("id", "parent_id", "depth", "request_limit", "token_limit", "cost_limit_usd", "window", "timezone",
            "metadata", "thresholds", "model_limits", "requests_per_minute", "tokens_per_minute")
_INSERT = sql.statement("admin_budget_insert")
_GET = sql.statement("admin_budget_get")
_LIST = sql.statement("admin_budget_list")
_CURRENT = sql.statement("admin_budget_current_windows")
_HISTORY = sql.statement("admin_budget_past_windows")
_TASKS = sql.statement("admin_budget_tasks")
_CHILDREN = sql.statement("admin_budget_children")
_PATCHABLE = ("request_limit", "token_limit", "cost_limit_usd", "metadata", "thresholds", "model_limits",
              "requests_per_minute", "tokens_per_minute")
#: Each glob's spend in the windows ``$2`` of the budgets ``$1``.
_MODELS = sql.statement("admin_budget_models")
#: Thresholds crossed in the windows ``$2`` of the budgets ``$1``, and in a budget's past windows.
_WARNINGS = sql.statement("admin_budget_warnings")
_PAST_WARNINGS = sql.statement("admin_budget_past_warnings")
_KEYS = sql.statement("admin_budget_keys")
_NEW_KEY = sql.statement("admin_budget_new_key")
_EVENTS = sql.statement("admin_budget_events")
_REVOKE = sql.statement("admin_budget_revoke")
_PARENT_DEPTH = sql.statement("admin_budget_depth")
_LOCK = sql.statement("admin_budget_lock")
_DELETE = sql.statement("admin_budget_delete")


def _not_found(budget_id: str, param: str = "budget_id") -> AdminError:
    return AdminError(404, "budget_not_found", f"No budget with id '{budget_id}'.", param)


def _dollars(value: Any) -> Any:
    return Decimal(str(value)) if value is not None else None


def _model_limits(limits: list[schemas.ModelLimit] | None) -> list[dict[str, Any]] | None:
    """``model_limits`` as stored (dollars as decimal strings; none: NULL)."""
    if not limits:
        return None
    return [{"model": e.model, **({"cost_limit_usd": str(_dollars(e.cost_limit_usd))} if e.cost_limit_usd is not None
                                  else {}), **({"token_limit": e.token_limit} if e.token_limit is not None else {})}
            for e in limits]


def _model_spend(row: Any) -> schemas.ModelSpend:
    d = dict(row)
    d["total_tokens"] = d["input_tokens"] + d["output_tokens"]
    return schemas.ModelSpend.model_validate(d)


def _spend(row: Any, start: datetime, end: datetime | None, warnings: list[Any]) -> schemas.WindowSpend:
    crossed = [schemas.Crossing(limit=w["limit_name"], threshold=w["threshold"], crossed_at=w["crossed_at"])
               for w in warnings]
    if row is None:
        return schemas.WindowSpend(window_start=start, window_end=end, resets_at=end, warnings=crossed)
    d = dict(row)
    d["warnings"] = crossed
    spent = d.pop("lease_spent", 0)  # admitted on escrow leases, not folded into the window yet
    d["admitted_requests"] += spent
    d["leased_requests"] -= spent
    d["total_tokens"] = d["input_tokens"] + d["output_tokens"]
    d["resets_at"] = d["window_end"]
    return schemas.WindowSpend.model_validate(d)


async def _budgets(conn: asyncpg.Connection, rows: list[Any], at: datetime, *,
                   detail: bool) -> list[schemas.Budget]:
    """The API view of ``budgets`` rows: current spend (one query for all), and with
    ``detail`` the task count, children and past windows."""
    spans = [windows.span(r["window"], r["timezone"], at) for r in rows]
    keys = ([r["id"] for r in rows], [s.start for s in spans])
    found = {(w["budget_id"], w["window_start"]): w for w in await conn.fetch(_CURRENT, *keys)}
    crossed: dict[tuple[str, datetime], list[Any]] = {}
    for w in await conn.fetch(_WARNINGS, *keys):
        crossed.setdefault((w["budget_id"], w["window_start"]), []).append(w)
    models: dict[str, list[schemas.ModelSpend]] = {}
    if any(r["model_limits"] for r in rows):
        for m in await conn.fetch(_MODELS, *keys):
            models.setdefault(m["budget_id"], []).append(_model_spend(m))
    rated = [r["id"] for r in rows if rates.rated(r)]
    minutes = await rates.current(conn, rated, at) if rated else {}
    out = []
    for row, span in zip(rows, spans):
        d = dict(row)
        d["parent"] = d.pop("parent_id")
        d["thresholds"] = list(thresholds.thresholds_of(row["thresholds"]))
        d["model_limits"] = [{**e, "cost_limit_usd": float(e["cost_limit_usd"])} if "cost_limit_usd" in e else e
                             for e in row["model_limits"] or []]
        if rates.rated(row):
            m = minutes.get(row["id"])
            d["minute"] = schemas.MinuteSpend(minute_start=rates.minute(at), resets_at=rates.minute(at)
                                              + timedelta(minutes=1), requests=m["requests"] if m else 0,
                                              tokens=m["tokens"] if m else 0)
        d["current"] = _spend(found.get((row["id"], span.start)), span.start, span.end,
                              crossed.get((row["id"], span.start), []))
        d["current"].models = models.get(row["id"], [])
        if detail:
            d["tasks"] = await conn.fetchval(_TASKS, row["id"])
            d["children"] = [c["id"] for c in await conn.fetch(_CHILDREN, row["id"])]
            past: dict[datetime, list[Any]] = {}
            for w in await conn.fetch(_PAST_WARNINGS, row["id"], span.start):
                past.setdefault(w["window_start"], []).append(w)
            d["windows"] = [_spend(w, w["window_start"], w["window_end"], past.get(w["window_start"], []))
                            for w in await conn.fetch(_HISTORY, row["id"], span.start)]
        out.append(schemas.Budget.model_validate(d))
    return out


def _now(request: Request) -> datetime:
    return windows.now(request.app.state.settings.clock_offset_s)


@router.post("/budgets", status_code=201, response_model=schemas.Budget, responses=responses(400, 404, 409))
async def create_budget(body: schemas.BudgetCreate, request: Request) -> schemas.Budget:
    """Create a budget; with ``parent`` it nests there (404 unknown parent, 409
    ``budget_too_deep`` past depth 4)."""
    values = body.model_dump()
    values["id"] = body.id or "budget_" + secrets.token_hex(6)
    values["parent_id"] = values.pop("parent")
    values["cost_limit_usd"] = _dollars(values["cost_limit_usd"])
    values["model_limits"] = _model_limits(body.model_limits)
    values["depth"] = 1
    async with request.app.state.db.acquire() as conn, conn.transaction():
        await durable(conn)
        if body.parent is not None:
            depth = await conn.fetchval(_PARENT_DEPTH, body.parent)
            if depth is None:
                raise _not_found(body.parent, "parent")
            if depth >= schemas.MAX_DEPTH:
                raise AdminError(409, "budget_too_deep", f"Budget '{body.parent}' is at depth {depth}; budgets "
                                 f"nest at most {schemas.MAX_DEPTH} deep.", "parent")
            values["depth"] = depth + 1
        try:
            async with conn.transaction():
                row = await conn.fetchrow(_INSERT, *(values[c] for c in _COLUMNS))
        except asyncpg.UniqueViolationError:
            raise AdminError(409, "budget_exists", f"A budget with id '{values['id']}' already exists.",
                             "id") from None
        return (await _budgets(conn, [row], _now(request), detail=True))[0]


@router.get("/budgets", response_model=schemas.BudgetList, responses=responses())
async def list_budgets(request: Request, limit: int = Query(100, ge=1, le=1000),
                       after: str | None = Query(None, pattern=schemas.BUDGET_ID_PATTERN,
                                                 description="A budget id: list budgets after it."),
                       parent: str | None = Query(None, pattern=schemas.BUDGET_ID_PATTERN,
                                                  description="Only the budgets nested directly in this one.")
                       ) -> schemas.BudgetList:
    """Budgets ordered by id with their current window's spend, ``limit`` per page."""
    async with request.app.state.db.acquire() as conn:
        rows = await conn.fetch(_LIST, parent, after, limit + 1)
        page = await _budgets(conn, rows[:limit], _now(request), detail=False)
    has_more = len(rows) > limit
    return schemas.BudgetList(data=page, has_more=has_more, next_after=page[-1].id if has_more and page else None)


@router.get("/budgets/{budget_id}", response_model=schemas.Budget, responses=responses(404))
async def get_budget(budget_id: BudgetIdPath, request: Request) -> schemas.Budget:
    """A budget with its spend in the current window, the windows before (newest first),
    its task count and its children."""
    async with request.app.state.db.acquire() as conn:
        row = await conn.fetchrow(_GET, budget_id)
        if row is None:
            raise _not_found(budget_id)
        return (await _budgets(conn, [row], _now(request), detail=True))[0]


@router.patch("/budgets/{budget_id}", response_model=schemas.Budget, responses=responses(400, 404))
async def update_budget(budget_id: BudgetIdPath, body: schemas.BudgetPatch, request: Request) -> schemas.Budget:
    """Change limits (only the fields given; ``null`` removes one). Takes effect at the
    next admission: tasks refused by an exhausted budget go on once it has room."""
    changes = {k: getattr(body, k) for k in body.model_fields_set if k in _PATCHABLE}
    if "metadata" in changes and changes["metadata"] is None:
        changes["metadata"] = {}
    if "cost_limit_usd" in changes:
        changes["cost_limit_usd"] = _dollars(changes["cost_limit_usd"])
    if "model_limits" in changes:
        changes["model_limits"] = _model_limits(changes["model_limits"])
    async with request.app.state.db.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(_LOCK, budget_id)
        if row is None:
            raise _not_found(budget_id)
        if changes:
            await durable(conn)
            columns = list(changes)  # names from _PATCHABLE only
            patch = assemble.fill("admin_budget_patch", sets=assemble.assignments(columns, _PATCHABLE))
            row = await conn.fetchrow(patch, budget_id, *(changes[c] for c in columns))
        return (await _budgets(conn, [row], _now(request), detail=True))[0]


@router.delete("/budgets/{budget_id}", status_code=204, response_class=Response, responses=responses(404, 409))
async def delete_budget(budget_id: BudgetIdPath, request: Request) -> Response:
    """Delete a budget with its window history and keys; 409 ``budget_not_empty`` while a
    task draws from it or a budget nests in it."""
    try:
        async with request.app.state.db.acquire() as conn, conn.transaction():
            await durable(conn)
            result = await conn.execute(_DELETE, budget_id)
    except (asyncpg.ForeignKeyViolationError, asyncpg.RestrictViolationError):
        raise AdminError(409, "budget_not_empty", f"Budget '{budget_id}' still has tasks or nested budgets; "
                         "delete them first.") from None
    if result == "DELETE 0":
        raise _not_found(budget_id)
    return Response(status_code=204)


@router.post("/budgets/{budget_id}/pause", response_model=schemas.Budget, responses=responses(400, 404))
async def pause_budget(budget_id: BudgetIdPath, body: schemas.PauseRequest, request: Request) -> schemas.Budget:
    """The kill switch: refuse every task under the budget and the budgets nested in it
    (400 ``budget_paused``, naming the pause) and cut their open requests in every
    gateway process, until ``/resume``. Tasks keep their own state. Pausing a paused
    budget keeps its first pause (who, why, since when) and announces it again."""
    async with request.app.state.db.acquire() as conn, conn.transaction():
        paused = await pause.pause(conn, budget_id, body.by, body.reason)
        if paused is None:
            raise _not_found(budget_id)
        return (await _budgets(conn, [paused[0]], _now(request), detail=True))[0]


@router.post("/budgets/{budget_id}/resume", response_model=schemas.Budget, responses=responses(400, 404, 409))
async def resume_budget(budget_id: BudgetIdPath, body: schemas.ResumeBudget, request: Request) -> schemas.Budget:
    """Lift the pause: the budget's tasks are admitted again at their next request (no
    per-task action). 409 ``budget_not_paused`` when it is not paused."""
    async with request.app.state.db.acquire() as conn, conn.transaction():
        resumed = await pause.resume(conn, budget_id, body.by, body.reason)
        if resumed is None:
            raise _not_found(budget_id)
        if resumed[1] is None:
            raise AdminError(409, "budget_not_paused", f"Budget '{budget_id}' is not paused.")
        return (await _budgets(conn, [resumed[0]], _now(request), detail=True))[0]


@router.get("/budgets/{budget_id}/events", response_model=schemas.BudgetEventList, responses=responses(404))
async def budget_events(budget_id: BudgetIdPath, request: Request, after: AfterSeq = 0,
                        limit: int = Query(500, ge=1, le=5000)) -> schemas.BudgetEventList:
    """The budget's history, oldest first: ``paused`` (who, why), ``resumed`` (who, why,
    the pause it lifted and how long it lasted)."""
    async with request.app.state.db.acquire() as conn:
        if await conn.fetchrow(_GET, budget_id) is None:
            raise _not_found(budget_id)
        rows = await conn.fetch(_EVENTS, budget_id, after, limit)
    return schemas.BudgetEventList(data=[schemas.BudgetEvent.model_validate(dict(r)) for r in rows])


def _key(row: Any) -> schemas.BudgetKey:
    d = dict(row)
    d["budget"] = d.pop("budget_id")
    return schemas.BudgetKey.model_validate(d)


@router.post("/budgets/{budget_id}/keys", status_code=201, response_model=schemas.BudgetKeyCreated,
             responses=responses(400, 404))
async def create_key(budget_id: BudgetIdPath, body: schemas.KeyCreate, request: Request) -> schemas.BudgetKeyCreated:
    """A new budget key (shown only in this answer; stored hashed). Every agent run using
    it gets its own task from ``template`` (see docs/budgets.md)."""
    key = budget_keys.new_key()
    template = body.template.model_dump(exclude_none=True)
    try:
        async with request.app.state.db.acquire() as conn, conn.transaction():
            await durable(conn)
            row = await conn.fetchrow(_NEW_KEY, "key_" + secrets.token_hex(8), budget_id, token_hash(key),
                                      template, body.metadata)
    except asyncpg.ForeignKeyViolationError:
        raise _not_found(budget_id) from None
    return schemas.BudgetKeyCreated(**_key(row).model_dump(), key=key)


@router.get("/budgets/{budget_id}/keys", response_model=schemas.BudgetKeyList, responses=responses(404))
async def list_keys(budget_id: BudgetIdPath, request: Request) -> schemas.BudgetKeyList:
    """The budget's keys, revoked ones included (never their secrets)."""
    async with request.app.state.db.acquire() as conn:
        if await conn.fetchrow(_GET, budget_id) is None:
            raise _not_found(budget_id)
        rows = await conn.fetch(_KEYS, budget_id)
    return schemas.BudgetKeyList(data=[_key(r) for r in rows])


@router.delete("/budgets/{budget_id}/keys/{key_id}", status_code=204, response_class=Response,
               responses=responses(404))
async def revoke_key(budget_id: BudgetIdPath, key_id: KeyIdPath, request: Request) -> Response:
    """Revoke a key: its next request is refused (401); the tasks of its runs are kept."""
    async with request.app.state.db.acquire() as conn, conn.transaction():
        await durable(conn)
        found = await conn.fetchval(_REVOKE, key_id, budget_id)
    if found is None:
        raise AdminError(404, "key_not_found", f"Budget '{budget_id}' has no key '{key_id}'.", "key_id")
    return Response(status_code=204)
