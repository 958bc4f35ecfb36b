"""What an admission attempt ends in (:mod:`app.admission.admission`): an
:class:`Admission` (the request admitted: what
:func:`~app.admission.admission.admit_request` returns for an
:class:`~app.admission.request.AdmissionRequest`), or an exception that rolls its
transaction back and sends it round again (:class:`NeedsHistory`, :class:`Held`) or
refuses it (:class:`Exhausted`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from app.errors import GatewayError
from app.guard.detector import Verdict
from app.guard.policy import Policy
from app.task import Task

if TYPE_CHECKING:  # annotations only: budgets sit above admission's rules
    from app.budgets.ledger import WindowKey
    from app.budgets.room import Room
    from app.budgets.rules import Verdict as BudgetVerdict


@dataclass(slots=True)
class Admission:
    """An admitted request: the task after the reservation, the policy in force for it
    (built once, for the rest of the request), the loop guard's verdict on the results
    it carried (``None`` when it carried none) and the dollars reserved."""

    task: Task
    policy: Policy
    verdict: Verdict | None = None
    reservation_usd: Decimal = Decimal(0)
    #: ``(field, tokens)`` taskgate adds to the forwarded body to bound its output
    #: (:meth:`Charge.added_output_max`), or ``None``.
    output_max: tuple[str, int] | None = None
    #: The ``reservations`` row of the hold (:mod:`app.admission.reservations`), if any.
    reservation_id: int | None = None
    #: The budget windows the request was counted in (settled after the exchange).
    budget_windows: tuple[WindowKey, ...] = ()
    #: Its ``admissions`` row's key (:mod:`app.db.commits`): its settlement runs once.
    key: uuid.UUID | None = None
    #: What its budget chain has left with it counted (:mod:`app.budgets.room`), if read.
    budget_room: Room | None = None


class NeedsHistory(Exception):
    """The conversation has an anchor and the request's history is not hashed yet: the
    transaction rolls back, the history is hashed without the row lock, admission runs
    again (once per request)."""


class Held(Exception):
    """The dollar ceiling holds the request (:data:`app.admission.ceiling.Decision.HOLD`); raised in
    the admission transaction, which rolls back."""

    def __init__(self, task: Task, policy: Policy, worst_usd: Decimal, budget: BudgetVerdict | None = None) -> None:
        super().__init__(task.id)
        self.task, self.policy, self.worst_usd, self.budget = task, policy, worst_usd, budget


class Exhausted(Exception):
    """A budget of the chain ran out: ``refusal`` (400 ``budget_exhausted``); raised in the
    admission transaction, which rolls back (not counted, no latch)."""

    def __init__(self, refusal: GatewayError, key: WindowKey, verdict: BudgetVerdict) -> None:
        super().__init__(refusal.message)
        self.refusal, self.key, self.verdict = refusal, key, verdict
