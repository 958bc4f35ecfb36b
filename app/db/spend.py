"""The durable spend record: one ``spend_daily`` row per task, model and UTC day
(migration 0020), what ``GET /admin/spend`` exports.

A request's tokens and dollars reach it in the statement that settles them on the task
(:mod:`app.guard.ledger`): :func:`spent` is a common table expression that statement
carries, after its locked task row (only that task's settlements write its rows, and
they already wait on its lock: no new hot row). The same statement counts the request
(``requests`` + 1): every admitted request is settled once
(:func:`app.db.commits.settling`), also one that upstream answered without usage. The
day is the settlement's, in UTC. Rows are never pruned.
"""

from __future__ import annotations

_SPENT = (
    "spent AS (INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens,"
    " output_tokens, cost_usd) SELECT (now() AT TIME ZONE 'UTC')::date, {task_id}, ${model}::text, {budget_id}, 1,"
    " ${input}, ${output}, ${cost} FROM {task} WHERE ${model}::text IS NOT NULL"
    " ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,"
    " input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,"
    " cost_usd = s.cost_usd + EXCLUDED.cost_usd)"
)


def spent(task: str, *, model: int, input: int, output: int, cost: int, row: str | None = None) -> str:
    """The ``spent AS (...)`` CTE: one request with the tokens and dollars of parameters
    ``$input``, ``$output``, ``$cost`` into the UTC day row of model ``$model`` (text;
    ``''`` unknown; NULL: not an admitted request, nothing written) of the task the CTE
    ``task`` returns (its ``id`` and ``budget_id`` columns, or those of the composite
    column ``row`` of it, e.g. ``(f.task)``). Reading ``task`` makes it run after the
    task's row is locked."""
    prefix = f"{row}." if row else f"{task}."
    return _SPENT.format(task=task, task_id=prefix + "id", budget_id=prefix + "budget_id", model=model,
                         input=input, output=output, cost=cost)
