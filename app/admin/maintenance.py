"""Admin actions that maintain the database by hand (Bearer ``TASKGATE_ADMIN_TOKEN``):
releasing a task's stranded dollar holds (:mod:`app.admission.reservations`) and
pruning finished tasks (:mod:`app.retention`).

Errors as the rest of the admin API (:mod:`app.admin.errors`): 401, 404 unknown task,
422 bad path, 503 database unreachable.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from app import retention
from app.admin.errors import AdminError, responses
from app.admin.routes import TaskIdPath
from app.admin.routes import router as admin_routes
from app.admission import reservations
from app.db import sql

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=admin_routes.dependencies)


class ReleasedReservations(BaseModel):
    """What ``POST /admin/tasks/{id}/release-reservations`` released."""

    task_id: str
    released: int = Field(description="Holds released (each one event 'reservation_released').")
    released_usd: str = Field(description="US dollars taken off reserved_usd, as a decimal string.")
    reserved_usd: str = Field(description="The task's reserved_usd after the release.")


@router.post("/tasks/{task_id}/release-reservations", response_model=ReleasedReservations,
             responses=responses(404))
async def release_reservations(task_id: TaskIdPath, request: Request) -> ReleasedReservations:
    """Release the task's dollar holds that are past their request's deadline (whatever
    process owns them) or whose gateway process on this host is gone. Holds of requests
    still in flight in a live gateway before their deadline are kept. The dollars are
    released, not charged."""
    pool = request.app.state.db
    if await pool.fetchval(sql.statement("task_exists"), task_id) is None:
        raise AdminError(404, "task_not_found", f"No task with id '{task_id}'.", "task_id")
    released = await reservations.release_task(pool, task_id)
    reserved = await pool.fetchval(sql.statement("admin_task_reserved"), task_id)
    return ReleasedReservations(task_id=task_id, released=released.reservations,
                                released_usd=str(released.usd), reserved_usd=str(reserved or 0))


class Pruned(BaseModel):
    """What ``POST /admin/prune`` deleted."""

    deleted: int = Field(description="Tasks deleted, each with its events, ledger and conversations.")
    older_than_days: float


@router.post("/prune", response_model=Pruned, responses=responses())
async def prune_tasks(request: Request,
                      older_than_days: float = Query(gt=0, le=100_000, description=(
                          "Delete tasks stopped or idle for more than this many days."))) -> Pruned:
    """Delete finished tasks now, as the retention job does (in batches)."""
    return Pruned(deleted=await retention.prune(request.app.state.db, older_than_days),
                  older_than_days=older_than_days)
