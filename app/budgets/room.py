"""The allowance left after an admission (issue 38 item 2), for the headers of the response.

Every proxied response carries what its task may still spend, the smaller of the task's
own room and its budget chain's, in the style of the providers' rate-limit headers:

- ``x-taskgate-remaining-requests``: requests (after this one);
- ``x-taskgate-remaining-tokens``: input + output tokens (before this response's);
- ``x-taskgate-remaining-usd``: US dollars, this request's worst case already held;
- ``x-taskgate-remaining-reset``: when the window of the tightest budget (the least share
  of any limit left) resets (ISO 8601, UTC).

A header is absent when nothing limits its unit (no reset for a lifetime budget or a task
without one). No round trip is added: the task's room comes from its row as the admission
returned it, the budgets' from the statement that admitted the request (the escrow lease
statements join each spent lease's window row by primary key and return
:data:`ROOM_RETURNING`; the locked dollar path holds its windows locked already). So the
figures are the admission's: ``requests`` is the limit less what the window admitted
(the admin API's ``admitted_requests``) near the wall, and at most 10 % short of it
before (:data:`ROOM_RETURNING`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

from app.task import Task

if TYPE_CHECKING:
    from app.budgets.rows import BudgetRow, WindowRow

#: A count or an amount of dollars.
N = TypeVar("N", int, Decimal)

#: What each lease the request was paid from has left in its budget's window, in the
#: ``RETURNING`` of the escrow statements that spend leases (``paid`` in the fast
#: statements, ``lease_spend``; ``app/db/sql/budget_leases.sql`` writes it out in each,
#: ``tests/test_sql_budgets.py`` checks them against it), whose ``FROM`` joins the lease's budget
#: as ``b`` and its window as ``w`` (``l``: the lease after this request): the limits, the
#: window's end, ``room_tokens_left`` and ``room_left``, the requests left:
#:
#: - as a rule, what no gateway holds set aside (``request_limit - admitted_requests -
#:   leased_requests`` of the window row) plus what this lease still holds: no other
#:   lease is read, so no admission of the budget touches another gateway's lease rows.
#:   Short of the exact figure by what other leases hold unspent, at most the window's
#:   ``leased_requests``;
#: - exact (the limit less the window's admitted requests, every lease's ``spent``
#:   summed; the statement's own ``+ 1`` is not visible to the sum) once that could be
#:   10 % or more of it: near the wall, where the figure matters and slices are small.
ROOM_RETURNING = """, b.depth AS room_depth, b.request_limit AS room_limit, b.token_limit AS room_token_limit,
       w.window_end AS room_reset, b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
       CASE WHEN b.request_limit IS NULL THEN NULL
            WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
            THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
            ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                  WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left"""
#: The same as arrays in chain order (root first), aggregated over ``paid`` in the fast
#: statements' final ``SELECT`` (``{order}``: the chain's order) next to the windows paid.
ROOM_ARRAYS = """, array_agg(room_left ORDER BY {order}) AS room_requests,
                   array_agg(room_tokens_left ORDER BY {order}) AS room_tokens,
                   array_agg(room_limit ORDER BY {order}) AS room_limits,
                   array_agg(room_token_limit ORDER BY {order}) AS room_token_limits,
                   array_agg(room_reset ORDER BY {order}) AS room_resets"""


@dataclass(frozen=True, slots=True)
class Room:
    """What is left: ``requests``, ``tokens``, ``usd`` (``None``: no limit of that unit),
    ``resets_at`` (``None``: never, a lifetime budget or a task) and ``share``, the least
    share of any limit left (0 to 1; ``inf`` when nothing limits)."""

    requests: int | None = None
    tokens: int | None = None
    usd: Decimal | None = None
    resets_at: datetime | None = None
    share: float = math.inf


def _share(left: int | Decimal | None, limit: int | Decimal | None) -> float:
    if left is None or limit is None:
        return math.inf
    return float(left) / float(limit) if limit else 0.0


def budget(request_limit: int | None, token_limit: int | None, cost_limit: Decimal | None,
           left_requests: int | None, left_tokens: int | None, left_usd: Decimal | None,
           resets_at: datetime | None) -> Room:
    """One budget window's room (``left_*`` ``None`` where it has no such limit). Pure."""
    return Room(None if left_requests is None else int(left_requests),
                None if left_tokens is None else int(left_tokens),
                None if left_usd is None else Decimal(left_usd), resets_at,
                min(_share(left_requests, request_limit), _share(left_tokens, token_limit),
                    _share(left_usd, cost_limit)))


def _least(values: Iterable[N | None]) -> N | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def combine(rooms: Sequence[Room]) -> Room | None:
    """The room of a chain: the least of each unit, and the reset of the tightest
    budget (least share left); ``None`` for no budget. Pure."""
    if not rooms:
        return None
    tightest = min(rooms, key=lambda r: r.share)
    return Room(_least(r.requests for r in rooms), _least(r.tokens for r in rooms), _least(r.usd for r in rooms),
                tightest.resets_at, tightest.share)


def of_fast_row(row: Mapping[str, Any]) -> Room | None:
    """The chain's room from an escrow fast statement's row (:data:`ROOM_ARRAYS`)."""
    requests = row.get("room_requests")
    if not requests:
        return None
    return combine([budget(limit, token_limit, None, left, tokens, None, resets) for left, tokens, limit,
                    token_limit, resets in zip(requests, row["room_tokens"], row["room_limits"],
                                               row["room_token_limits"], row["room_resets"])])


def of_spend_rows(rows: Iterable[Mapping[str, Any]]) -> Room | None:
    """The chain's room from the escrow spend's rows (:data:`ROOM_RETURNING`)."""
    return combine([budget(r["room_limit"], r["room_token_limit"], None, r["room_left"], r["room_tokens_left"],
                           None, r["room_reset"]) for r in rows])


def of_locked(budgets: Sequence[BudgetRow], rows: Sequence[WindowRow],
              worst_usd: Decimal) -> Room | None:
    """The chain's room from its locked windows (``rows``, as read before this request was
    counted) once it is counted with ``worst_usd`` reserved: the dollar path. Pure."""
    out = []
    for b, w in zip(budgets, rows):
        left = None if b["request_limit"] is None else b["request_limit"] - w["admitted_requests"] \
            - w["leased_requests"] - 1
        tokens = None if b["token_limit"] is None else b["token_limit"] - w["input_tokens"] - w["output_tokens"]
        usd = None if b["cost_limit_usd"] is None else b["cost_limit_usd"] - w["cost_usd"] - w["reserved_usd"] \
            - worst_usd
        out.append(budget(b["request_limit"], b["token_limit"], b["cost_limit_usd"], left, tokens, usd,
                          w.get("window_end")))
    return combine(out)


def of_task(task: Task) -> Room:
    """A task's own room after its admission (the row it returned; lifetime: no reset). Pure."""
    return Room(task.request_limit - task.admitted_requests,
                None if task.token_limit is None else task.token_limit - task.input_tokens - task.output_tokens,
                None if task.cost_limit_usd is None else task.cost_limit_usd - task.cost_usd - task.reserved_usd)


def _instant(at: datetime) -> bytes:
    return at.isoformat(timespec="seconds").replace("+00:00", "Z").encode()


def headers(task: Room, chain: Room | None) -> list[tuple[bytes, bytes]]:
    """The ``x-taskgate-remaining-*`` headers (raw ASGI pairs) for a task's room and its
    chain's (module docstring); a value below 0 is 0. Pure."""
    rooms = [task] if chain is None else [task, chain]
    out = []
    requests, tokens, usd = (_least(getattr(r, unit) for r in rooms) for unit in ("requests", "tokens", "usd"))
    if requests is not None:
        out.append((b"x-taskgate-remaining-requests", str(max(0, requests)).encode()))
    if tokens is not None:
        out.append((b"x-taskgate-remaining-tokens", str(max(0, tokens)).encode()))
    if usd is not None:
        out.append((b"x-taskgate-remaining-usd", f"{max(Decimal(0), usd):.6f}".encode()))
    if chain is not None and chain.resets_at is not None:
        out.append((b"x-taskgate-remaining-reset", _instant(chain.resets_at)))
    return out
