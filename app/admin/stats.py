"""The fleet's numbers over time and one task's requests, from the request log
(:mod:`app.console.request_log`): ``GET /admin/stats`` and ``GET /admin/tasks/{id}/requests``.

``/admin/stats?since=&until=&step=`` buckets in SQL (one ``GROUP BY`` per series over the
``finished_at`` / ``created_at`` indexes): requests, tokens and dollars per bucket and model
(the :data:`TOP_MODELS` busiest models of the period by name, the rest as ``other``), stops
per bucket and reason (``task_events``), the top tasks of the period by dollars and by
requests, and the tasks stopped in the period with the sentence their requests get. Times
are UTC; ``step`` is in seconds; at most :data:`MAX_BUCKETS` buckets (a smaller step is
raised to fit); a period that ends before it starts has no buckets. ``fit=true`` starts the
period at its first request or stop (within :data:`FIT_LOOKBACK` when ``since`` is not
given), so fresh data fills the charts instead of a spike at the right edge (:func:`fitted`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any, Mapping, Sequence

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, BeforeValidator, Field

from app.admin import schemas
from app.admin.errors import AdminError, responses
from app.admission.refusals import stop_message
from app.db import sql
from app.db.bounds import INT8_MAX
from app.task import Task

router = APIRouter()

MAX_BUCKETS = 1000
TOP_MODELS = 6
TOP_TASKS = 10
STOPPED_SHOWN = 50
#: Default number of buckets when ``step`` is not given.
DEFAULT_BUCKETS = 60
#: ``fit=true`` without ``since`` looks this far back for the first request or stop.
FIT_LOOKBACK = timedelta(days=7)
#: A fitted period spans at least this long (a first request a second ago is not a 1 s chart).
FIT_MIN = timedelta(minutes=1)

_SERIES = sql.statement("stats_series")
_STOPS = sql.statement("stats_stops")
#: Both top lists from one pass over the period's rows.
_TOP = sql.statement("stats_top")
#: The period's first request or stop (``least`` skips a NULL); both read one index.
_FIRST = sql.statement("stats_first")
_STOPPED = sql.statement("stats_stopped")
_REQUESTS = sql.statement("stats_requests")


class TaskTotal(BaseModel):
    task_id: str
    requests: int
    tokens: int
    cost_usd: float = Field(description="US dollars.")


class StoppedTask(BaseModel):
    id: str
    stop_reason: str | None
    stopped_at: datetime
    stop_message: str | None


class Totals(BaseModel):
    requests: int
    tokens: int
    cost_usd: float
    stops: int


class Stats(BaseModel):
    """Series are lists aligned with ``buckets`` (each bucket's start, UTC)."""

    since: datetime
    until: datetime
    step_s: int
    buckets: list[datetime]
    requests: dict[str, list[int]] = Field(description="Per model (``other``: the rest).")
    tokens: dict[str, list[int]] = Field(description="Input + output tokens per model.")
    cost_usd: dict[str, list[float]] = Field(description="US dollars per model.")
    stops: dict[str, list[int]] = Field(description="Stops per stop reason.")
    totals: Totals
    top_by_cost: list[TaskTotal]
    top_by_requests: list[TaskTotal]
    stopped: list[StoppedTask] = Field(description=f"Tasks stopped in the period, newest first "
                                       f"(at most {STOPPED_SHOWN}).")


class RequestRow(BaseModel):
    id: int
    finished_at: datetime
    endpoint: str
    model: str | None
    provider: str | None
    status: int | None
    outcome: str
    stream: bool
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = Field(description="US dollars; null: not priced.")
    duration_ms: float = Field(description="From admission to the client's last byte.")
    request_id: str | None


class RequestList(BaseModel):
    data: list[RequestRow] = Field(description="Newest first.")
    has_more: bool
    next_before: int | None


_UTC_MIN = datetime.min.replace(tzinfo=timezone.utc)
_UTC_MAX = datetime.max.replace(tzinfo=timezone.utc)


def _utc(t: datetime) -> datetime:
    """``t`` in UTC (naive: taken as UTC); clamped to the datetime range at its ends."""
    try:
        return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    except OverflowError:
        return _UTC_MIN if t.year == datetime.min.year else _UTC_MAX


def _iso_date_time(value: object) -> object:
    """A query's date-time is ISO 8601 text: a bare number (which pydantic would read as
    Unix seconds) is refused, so the API takes what its schema says (``format: date-time``)."""
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return value
        raise ValueError("an ISO 8601 date-time (e.g. 2026-12-01T12:00:00Z), not a number")
    return value




def period(since: datetime | None, until: datetime | None, step: int | None,
           now: datetime) -> tuple[datetime, datetime, int, int]:
    """``(since, until, step_s, buckets)`` of a stats query (pure). Defaults: until now,
    since an hour before until, :data:`DEFAULT_BUCKETS` buckets. A ``step`` too small for
    the period is raised so that it has at most :data:`MAX_BUCKETS` buckets; a period
    that ends before it starts is empty (no buckets)."""
    until = _utc(until) if until is not None else now
    if since is not None:
        since = _utc(since)
    else:
        since = until - timedelta(hours=1) if until - _UTC_MIN > timedelta(hours=1) else _UTC_MIN
    span = (until - since).total_seconds()
    if span <= 0:
        return since, until, step or 1, 0
    step = max(step or math.ceil(span / DEFAULT_BUCKETS), math.ceil(span / MAX_BUCKETS))
    return since, until, step, math.ceil(span / step)


def fitted(until: datetime, first: datetime | None) -> datetime | None:
    """The start of a period fitted to its data (pure): a twentieth of the span before its
    first request or stop ``first`` (so the first point is off the left edge), the span at
    least :data:`FIT_MIN`; ``None`` when there is no data (the default period applies)."""
    if first is None:
        return None
    span = max(until - first, FIT_MIN)
    try:
        return until - span * 21 / 20
    except OverflowError:  # a period reaching back to year 1
        return first


def _fold(rows: Sequence[Mapping[str, Any]], key: str, value: str, n: int,
          keep: set[str] | None) -> dict[str, list[int | Decimal]]:
    """``value`` summed per ``key`` into ``n`` buckets (the rows' ``bucket``), keys not
    in ``keep`` as ``other``; sums are ``int`` or ``Decimal`` as PostgreSQL gives them."""
    out: dict[str, list[int | Decimal]] = defaultdict(lambda: [0] * n)
    for r in rows:
        name = r[key] if keep is None or r[key] in keep else "other"
        if 0 <= r["bucket"] < n:
            out[name or "none"][r["bucket"]] += r[value]
    return dict(out)


@router.get("/stats", response_model=Stats, responses=responses())
async def stats(request: Request,
                since: Annotated[datetime | None, BeforeValidator(_iso_date_time), Query(
                    description="Start (ISO 8601, UTC if no zone); default an hour before until.")] = None,
                until: Annotated[datetime | None, BeforeValidator(_iso_date_time), Query(
                    description="End (ISO 8601); default now.")] = None,
                step: int | None = Query(None, ge=1, le=INT8_MAX, description=(
                    f"Bucket width, seconds; raised to fit at most {MAX_BUCKETS} buckets.")),
                fit: bool = Query(False, description=(
                    "Start the period just before its first request or stop (looked for from since, "
                    "default 7 days before until), at least a minute long; no data: the default period."))
                ) -> Stats:
    """Requests, tokens, dollars and stops over time for the whole fleet, the top tasks,
    and the tasks stopped in the period."""
    now = datetime.now(timezone.utc)
    async with request.app.state.db.acquire() as conn:
        if fit:
            end = _utc(until) if until is not None else now
            start = _utc(since) if since is not None else max(end, _UTC_MIN + FIT_LOOKBACK) - FIT_LOOKBACK
            if start < end:
                since = fitted(end, await conn.fetchval(_FIRST, start, end)) or since
        since, until, step, n = period(since, until, step, now)
        series = await conn.fetch(_SERIES, since, until, float(step))
        stop_rows = await conn.fetch(_STOPS, since, until, float(step))
        top = await conn.fetch(_TOP, since, until, TOP_TASKS)
        stopped = await conn.fetch(_STOPPED, since, until, STOPPED_SHOWN)
    by_cost = [r for r in top if r["list"] == "cost"]
    by_requests = [r for r in top if r["list"] == "requests"]
    per_model: dict[str, int] = defaultdict(int)
    for r in series:
        per_model[r["model"]] += r["requests"]
    keep = set(sorted(per_model, key=lambda m: (-per_model[m], m))[:TOP_MODELS])
    cost = {m: [float(v) for v in vs] for m, vs in _fold(series, "model", "cost", n, keep).items()}
    return Stats(
        since=since, until=until, step_s=step, buckets=[since + timedelta(seconds=step * i) for i in range(n)],
        requests=_fold(series, "model", "requests", n, keep), tokens=_fold(series, "model", "tokens", n, keep),
        cost_usd=cost, stops=_fold(stop_rows, "reason", "stops", n, None),
        totals=Totals(requests=sum(r["requests"] for r in series), tokens=sum(r["tokens"] for r in series),
                      cost_usd=float(sum(r["cost"] for r in series)), stops=sum(r["stops"] for r in stop_rows)),
        top_by_cost=[TaskTotal(task_id=r["task_id"], requests=r["requests"], tokens=r["tokens"],
                               cost_usd=float(r["cost"])) for r in by_cost],
        top_by_requests=[TaskTotal(task_id=r["task_id"], requests=r["requests"], tokens=r["tokens"],
                                   cost_usd=float(r["cost"])) for r in by_requests],
        stopped=[StoppedTask(id=r["id"], stop_reason=r["stop_reason"], stopped_at=r["stopped_at"],
                             stop_message=stop_message(Task.from_row(r))) for r in stopped])


@router.get("/tasks/{task_id}/requests", response_model=RequestList, responses=responses(404))
async def task_requests(request: Request,
                        task_id: Annotated[str, Path(pattern=schemas.TASK_ID_PATTERN, description="The task's id.")],
                        before: int = Query(INT8_MAX, ge=1, le=INT8_MAX, description="Rows before this id."),
                        limit: int = Query(200, ge=1, le=5000)) -> RequestList:
    """The task's relayed requests from the request log, newest first: time, endpoint,
    model, status, outcome, tokens, dollars, duration and request id."""
    async with request.app.state.db.acquire() as conn:
        if await conn.fetchval(sql.statement("task_exists"), task_id) is None:
            raise AdminError(404, "task_not_found", f"No task with id '{task_id}'.", "task_id")
        rows = await conn.fetch(_REQUESTS, task_id, before, limit + 1)
    page = [RequestRow.model_validate({**dict(r), "cost_usd": None if r["cost_usd"] is None
                                       else float(r["cost_usd"])}) for r in rows[:limit]]
    more = len(rows) > limit
    return RequestList(data=page, has_more=more, next_before=page[-1].id if more and page else None)
