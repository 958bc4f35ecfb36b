"""Per-model limits of a budget (issue 38 item 4): dollars and tokens per model glob,
inside the budget's totals, in its current window.

A budget's ``model_limits`` is a list of ``{"model": glob, "cost_limit_usd"?, "token_limit"?}``
(:func:`fnmatch.fnmatchcase` globs over the model the request names, as a task's
``allowed_models``). A request whose model matches a glob is also counted in that glob's
row of the window (``budget_model_windows``), by the same rules as the budget's own
limits (:mod:`app.budgets.rules`):

- ``token_limit``: tokens upstream reported for the glob's requests in the window ``>=``
  the limit: exhausted (reported after the response, so it admits while under it);
- ``cost_limit_usd``: settled dollars plus this request's worst case past the limit:
  exhausted; past it only with the dollars in flight: held (the request waits, then 429
  ``cost_reserved``). In-flight dollars are ``budget_model_holds`` rows whose
  ``reservations`` row still exists, so a hold settled or swept (a gateway killed)
  stops counting with the task's own hold, with no sweep of its own.

A glob that ran out refuses with 400 ``budget_exhausted`` naming the glob and the model;
requests to other models go on. Nothing is counted for a refused request.

Exact under concurrency because a budget with model limits is decided on the locked
path (:func:`app.budgets.ledger.reserve`): its window row is locked for the admission's
transaction, so its admissions run one at a time (the bound: docs/budgets.md).

Pure parts: :func:`glob_problem`, :func:`matching`, :func:`verdict`. I/O: :func:`check`,
:func:`count`, :func:`hold`, :func:`settle`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import asyncpg

from app.admission.ceiling import Decision, decide
from app.budgets.rules import Verdict
from app.db import sql

if TYPE_CHECKING:
    from app.budgets.rows import BudgetRow, WindowRow

#: ``Verdict.what`` of a refusal by a model limit.
MODEL_LIMIT = "model_limit"
#: At most this many entries per budget, globs at most this long.
MAX_ENTRIES = 50
MAX_GLOB = 200
#: One glob's row of a window: ``(budget_id, window_start, glob)``.
ModelKey = tuple[str, datetime, str]

# The statements: app/db/sql/budgets.sql (budget_model_*).
_LOCK = sql.statement("budget_model_lock")
_COUNT = sql.statement("budget_model_count")
_HOLD = sql.statement("budget_model_hold")
_SETTLE = sql.statement("budget_model_settle")


#: :func:`glob_problem`'s rule as a JSON Schema ``pattern`` (the admin API publishes it, so
#: generated clients and schemathesis know which globs are valid): printable ASCII without
#: spaces, ``[`` only opening a class that a ``]`` closes (after ``[`` or ``[!`` a ``]`` is the
#: class's first member, as fnmatch reads it).
GLOB_PATTERN = r'^(?:[!-Z\\-~]|\[(?:!(?:\][!-\\^-~]*|[!-\\^-~]+)|\][!-\\^-~]*|["-\\^-~][!-\\^-~]*)\])+$'


def glob_problem(glob: Any) -> str | None:
    """Why ``glob`` is not a model glob, in a sentence, or ``None``: 1 to
    :data:`MAX_GLOB` printable ASCII characters without spaces, every ``[`` closed by a
    ``]`` (``*``, ``?``, ``[abc]``, ``[!abc]`` as :mod:`fnmatch` reads them); the same
    rule as :data:`GLOB_PATTERN`, which the admin API's schema publishes. Pure."""
    if not isinstance(glob, str) or not glob:
        return "a model glob must be a non-empty string, e.g. 'gpt-4.1*'"
    if len(glob) > MAX_GLOB:
        return f"a model glob is at most {MAX_GLOB} characters"
    bad = next((c for c in glob if not "!" <= c <= "~"), None)
    if bad is not None:
        return (f"model glob {glob!r} holds {bad!r}: a model glob is printable ASCII (spaces and control "
                "characters never occur in a model name)")
    i = 0
    while i < len(glob):
        if glob[i] == "[":
            j = i + 1 + (glob[i + 1:i + 2] == "!")
            j += glob[j:j + 1] == "]"  # a ']' first in a class is part of it
            end = glob.find("]", j)
            if end < 0:
                return (f"model glob {glob!r} opens a character class with '[' at character {i + 1} and never "
                        "closes it with ']'")
            i = end
        i += 1
    return None


def entries(budget: BudgetRow) -> list[Mapping[str, Any]]:
    """The budget row's ``model_limits`` (``[]`` for none)."""
    value = budget.get("model_limits")
    return list(value) if isinstance(value, list) else []


def matching(budget: BudgetRow, model: str | None) -> list[Mapping[str, Any]]:
    """The entries of ``budget`` whose glob matches ``model`` (none for a request that
    names no model). Pure."""
    if model is None:
        return []
    return [e for e in entries(budget) if fnmatch.fnmatchcase(model, e["model"])]


def metered(budgets: Sequence[BudgetRow], model: str | None) -> bool:
    """Whether a dollar limit of a glob matching ``model`` applies in the chain."""
    return any(e.get("cost_limit_usd") is not None for b in budgets for e in matching(b, model))


def verdict(budget_id: str, entry: Mapping[str, Any], row: Mapping[str, Any], model: str, worst_usd: Decimal,
            resets_at: datetime | None) -> Verdict:
    """One glob's verdict on its window row (``row`` with ``held_usd``, the dollars in
    flight): admit, hold or exhausted (``Decision.LATCH``, read: exhausted). Pure."""
    base = {"model": entry["model"], "requested_model": model}
    limit = entry.get("token_limit")
    tokens = int(row["input_tokens"]) + int(row["output_tokens"])
    if limit is not None and tokens >= int(limit):
        return Verdict(Decision.LATCH, budget_id, MODEL_LIMIT,
                       {**base, "limit": "token_limit", "total_tokens": tokens, "token_limit": int(limit)}, resets_at)
    cost_limit = entry.get("cost_limit_usd")
    if cost_limit is None:
        return Verdict(Decision.ADMIT)
    decision = decide(row["cost_usd"], row["held_usd"], worst_usd, Decimal(str(cost_limit)))
    if decision is Decision.ADMIT:
        return Verdict(Decision.ADMIT)
    return Verdict(decision, budget_id, MODEL_LIMIT,
                   {**base, "limit": "cost_limit_usd", "cost_usd": str(row["cost_usd"]),
                    "reserved_usd": str(row["held_usd"]), "request_reservation_usd": str(worst_usd),
                    "cost_limit_usd": str(cost_limit)}, resets_at)


async def check(conn: asyncpg.Connection, budgets: Sequence[BudgetRow], keys: Sequence[tuple[str, datetime]],
                rows: Sequence[WindowRow], model: str | None,
                worst_usd: Decimal) -> tuple[Verdict, list[ModelKey]]:
    """The chain's verdict over the globs matching ``model`` (each glob's window row
    created if missing and locked; call with the budgets' windows locked, root first)
    and the rows the request would be counted in. Exhausted wins over held."""
    found: list[Verdict] = []
    counted: list[ModelKey] = []
    for budget, (budget_id, start), window in zip(budgets, keys, rows):
        for entry in matching(budget, model):
            row = await conn.fetchrow(_LOCK, budget_id, start, entry["model"])
            found.append(verdict(budget_id, entry, row, model or "", worst_usd, window.get("window_end")))
            counted.append((budget_id, start, entry["model"]))
    for wanted in (Decision.LATCH, Decision.HOLD):
        refused = next((v for v in found if v.decision is wanted), None)
        if refused is not None:
            return refused, counted
    return Verdict(Decision.ADMIT), counted


def _columns(keys: Sequence[ModelKey]) -> tuple[list[str], list[datetime], list[str]]:
    return [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]


async def count(conn: asyncpg.Connection, keys: Sequence[ModelKey]) -> None:
    """Count one admitted request in each glob row of ``keys`` (in the admission's transaction)."""
    if keys:
        await conn.execute(_COUNT, *_columns(keys))


async def hold(conn: asyncpg.Connection, reservation_id: int, keys: Sequence[ModelKey], usd: Decimal) -> None:
    """Hold ``usd`` (the request's worst case) in each glob row of ``keys`` for as long as
    the ``reservations`` row ``reservation_id`` exists (in the admission's transaction)."""
    budget_ids, starts, globs = _columns(keys)
    await conn.execute(_HOLD, reservation_id, budget_ids, starts, usd, globs)


async def settle(conn: asyncpg.Connection, keys: Sequence[ModelKey], input_tokens: int, output_tokens: int,
                 cost_usd: Decimal) -> None:
    """Add a finished request's tokens and settled dollars to its glob rows (its hold
    stops counting when its ``reservations`` row is deleted, in the same settlement)."""
    if keys:
        await conn.execute(_SETTLE, *_columns(keys), input_tokens, output_tokens, cost_usd)
