"""How large a slice of a budget window an escrow lease gets, and when a take must
reclaim the slices other tasks hold. Pure: no I/O, no clock.

A window's request allowance is split three ways: ``admitted_requests`` (spent and
folded back), ``leased_requests`` (granted to open leases, spent or not) and the **free
remainder** ``request_limit - admitted_requests - leased_requests``. The invariant of
every window, under any concurrency: ``admitted_requests + leased_requests <=
request_limit``; a lease's ``spent <= granted``. So no window ever admits past its limit.

The rule of a take (:mod:`app.budgets.escrow`), one budget window at a time, under the
window's row lock:

1. a window whose free remainder is at least 1 grants :func:`slice_size` of it: at most
   ``cap`` requests and at most ``1/SHARE`` of what is free (so the slices shrink
   geometrically as the budget nears its limit and the last requests are granted one
   at a time);
2. a window whose free remainder is below 1 while leases hold unspent requests
   (``leased_requests`` > spent) **reclaims** them all: every lease of the window is cut
   to what it spent (waiting for leases being spent at that moment), and the remainder
   is computed again;
3. a window still without one free request after the reclaim is truly exhausted:
   every request of its limit is admitted or being admitted; the request is refused
   with 400 ``budget_exhausted``.

A request is therefore refused only when the budget is exhausted counting what other
slices held, and a lease of a dead gateway holds nothing anyone needs: the first take
that finds the window short reclaims it (its expiry only bounds how long the rows
linger when nobody is short).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.budgets.rows import BudgetRow, WindowRow

#: A take grants at most this fraction (1/SHARE) of a window's free remainder.
SHARE = 16


def free_requests(budget: BudgetRow, window: WindowRow) -> int | None:
    """The window's free remainder of requests (``None``: the budget has no request
    limit); negative when an operator lowered the limit below what is granted."""
    limit = budget.get("request_limit")
    if limit is None:
        return None
    return int(limit) - int(window["admitted_requests"]) - int(window["leased_requests"])


def slice_size(free: int | None, cap: int) -> int:
    """Requests one take grants from a window with ``free`` requests free (``None``:
    no limit): ``min(cap, free // SHARE)``, at least 1 while anything is free; 0 when
    nothing is."""
    if free is None:
        return cap
    if free <= 0:
        return 0
    return max(1, min(cap, free // SHARE))


def needs_reclaim(free: int | None, leased: int) -> bool:
    """Whether a take must reclaim the window's leases: nothing free while ``leased``
    requests (granted to leases, some perhaps not spent) are out."""
    return free is not None and free < 1 and leased > 0


def committed_view(window: WindowRow) -> WindowRow:
    """The window as the ceiling rules (:func:`app.budgets.rules.window_verdict`) read it:
    ``admitted_requests`` counts what is granted to leases too (it may all be spent)."""
    view = window.copy()
    view["admitted_requests"] = int(window["admitted_requests"]) + int(window.get("leased_requests") or 0)
    return view
