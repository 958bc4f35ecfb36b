"""What the core reports as it works: a small registry of typed events.

The core (``db``, ``admission``, ``proxy``) emits; outer rooms (the console's metrics,
logs, stop webhook and traces) subscribe once at start-up (:func:`app.main.create_app` mounts the console, whose
:func:`app.console.listeners.subscribe` runs then). The core never imports the console.

- :data:`LATCH_SET` (:class:`LatchSet`): a stop latch was set
  (:func:`app.db.tasks.set_latch`). Emitted *inside* the latch's transaction, so a
  subscriber that acts on it (the stop webhook) must wait until the stop is committed.
- :data:`EXCHANGE_STARTED` / :data:`EXCHANGE_FINISHED`: around each relayed exchange
  (:class:`app.proxy.accounting.Accounting`); ``finished`` after the client has its
  last byte, before usage is recorded.
- :data:`ADMISSION_DONE` (:class:`AdmissionDone`): one admission ran
  (:func:`app.admission.admission.admit`), admitted or refused, with its duration.
- :data:`LOOP_WARNED` (:class:`LoopWarned`): the loop guard's warning was added to a
  forwarded request.
- :data:`LOOP_STRUCK` (:class:`LoopStruck`): a soft loop rule struck an answer (cut or
  withheld it) without stopping the task (:mod:`app.ledger.strikes`);
  :data:`LOOP_NOTED` (:class:`LoopNoted`): a gateway note (a strike's, a warning's,
  ``no_progress``) was added to a forwarded request.
- :data:`GATEWAY_ANSWERED` (:class:`GatewayAnswered`): a request the gateway answered
  itself, never forwarded (a refusal, a 4xx, a 503); emitted by the error handler.
- :data:`COST_SETTLED` (:class:`CostSettled`): a request with a dollar reservation
  settled from upstream's usage (its reservation and its actual cost).
- :data:`COST_HELD` (:class:`CostHeld`): a request the dollar ceiling held ended
  (admitted, timed out, refused) after waiting.
- :data:`BUDGET_REFUSED` (:class:`BudgetRefused`): an exhausted budget refused a request
  (:func:`app.admission.admission.admit`); :data:`BUDGET_EXHAUSTED`
  (:class:`BudgetExhausted`): the first such refusal of a budget's window, across
  processes (committed); :data:`BUDGET_SPENT` (:class:`BudgetSpent`): a request settled
  into a budget's window (:class:`app.proxy.accounting.Accounting`);
  :data:`BUDGET_THRESHOLD` (:class:`BudgetThreshold`): a budget's window reached one of its
  warning thresholds (once across processes, committed; :mod:`app.budgets.thresholds`);
  :data:`BUDGET_USAGE` (:class:`BudgetUsage`): the fraction of a limit a window used changed.
- :data:`TASK_THRESHOLD` (:class:`TaskThreshold`): a task reached one of its warning
  thresholds (once per limit value across processes, committed; :mod:`app.budgets.task_thresholds`).
  Both threshold events are a :class:`Threshold` (the limit, what was used, the sentence)
  with their subject's id (a budget's with its window).
- :data:`MCP_CALL` (:class:`McpCall`): a ``tools/call`` through ``/mcp/<name>`` ended.

Emitting is synchronous and cheap (a loop over the subscribers); a subscriber must not
block. One that raises is logged and skipped: the core's work never fails because an
outer room did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

if TYPE_CHECKING:
    from datetime import datetime
    from decimal import Decimal

    from app.errors import GatewayError
    from app.proxy.outcome import Outcome

logger = logging.getLogger(__name__)

E = TypeVar("E")


class Channel(Generic[E]):
    """Subscribers of one kind of event, called in the order they subscribed."""

    __slots__ = ("name", "_subscribers")

    def __init__(self, name: str) -> None:
        self.name = name
        self._subscribers: tuple[Callable[[E], None], ...] = ()

    def subscribe(self, subscriber: Callable[[E], None]) -> None:
        """Call ``subscriber(event)`` on every event from now on. Subscribing the same
        callable again does nothing (``create_app`` may run more than once a process)."""
        if subscriber not in self._subscribers:
            self._subscribers += (subscriber,)

    def unsubscribe(self, subscriber: Callable[[E], None]) -> None:
        self._subscribers = tuple(s for s in self._subscribers if s != subscriber)

    def emit(self, event: E) -> None:
        """Hand ``event`` to every subscriber; one that raises is logged and skipped."""
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception:  # an outer room's failure is not the core's
                logger.exception("a subscriber of %s failed", self.name)


@dataclass(frozen=True, slots=True)
class LatchSet:
    """``task_id`` was stopped for ``reason``; ``event_id`` is its ``stopped`` row in
    ``task_events`` (visible to others once the transaction commits)."""

    task_id: str
    reason: str
    event_id: int


@dataclass(frozen=True, slots=True)
class ExchangeStarted:
    """An admitted request of ``task_id`` is about to go upstream."""

    task_id: str
    stream: bool


@dataclass(frozen=True, slots=True)
class ExchangeFinished:
    """How the exchange of ``task_id`` ended. ``started`` is ``time.monotonic()`` when
    it was admitted; ``stream`` whether the client asked for a stream. ``endpoint`` is
    the path (``/v1/chat/completions``), ``model`` the model the client asked for (the
    configured name, before any alias), ``provider`` the configured provider's name,
    ``request_id`` the gateway's request id, ``cost_usd`` what the response costs in US
    dollars (``None``: not priced), ``conversation_key`` the loop guard's conversation."""

    task_id: str
    outcome: Outcome
    started: float
    stream: bool
    endpoint: str = ""
    model: str | None = None
    provider: str | None = None
    request_id: str | None = None
    cost_usd: Decimal | None = None
    conversation_key: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionDone:
    """One admission took ``seconds`` (database round trips included)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class LoopWarned:
    """The loop guard warned the model of ``task_id`` about ``tool_name`` (repeated
    ``count`` times)."""

    task_id: str
    tool_name: str
    count: int


@dataclass(frozen=True, slots=True)
class LoopStruck:
    """A strike of ``rule`` (``repeated_output``, ``repeated_response``, ``no_progress``)
    on ``task_id``, the ``strike``-th in its conversation's window."""

    task_id: str
    rule: str
    strike: int


@dataclass(frozen=True, slots=True)
class LoopNoted:
    """A gateway note about ``rule`` was due in a request of ``task_id`` forwarded
    upstream; ``delivered``: it was added (``TASKGATE_GUARD_NOTES``)."""

    task_id: str
    rule: str
    delivered: bool = True


@dataclass(frozen=True, slots=True)
class GatewayAnswered:
    """The gateway answered a request on ``path`` itself with ``error``."""

    path: str
    error: GatewayError


@dataclass(frozen=True, slots=True)
class CostSettled:
    """A request of ``task_id`` reserved ``reservation_usd`` (its worst case) and
    settled at ``actual_usd`` from upstream's usage (US dollars)."""

    task_id: str
    reservation_usd: Decimal
    actual_usd: Decimal


@dataclass(frozen=True, slots=True)
class CostHeld:
    """A request of ``task_id`` the dollar ceiling held (it fitted only once requests in
    flight settled) ended ``outcome``: ``admitted``, ``timed_out`` (429 ``cost_reserved``)
    or ``refused`` (the task stopped meanwhile, or the ceiling was truly reached), after
    ``seconds`` of waiting."""

    task_id: str
    outcome: str
    seconds: float


@dataclass(frozen=True, slots=True)
class BudgetRefused:
    """Budget ``budget_id`` refused a request with ``error`` (403 ``budget_exhausted``)."""

    budget_id: str
    error: GatewayError


@dataclass(frozen=True, slots=True)
class BudgetExhausted:
    """Budget ``budget_id`` ran out of ``what`` (``request_limit``, ``token_limit``,
    ``cost_limit``) in its window starting at ``window_start`` (``resets_at``: when the
    next opens; ``None`` for a lifetime budget): its first refusal there, with ``error``.
    Emitted once per window across processes, after the mark is committed."""

    budget_id: str
    window_start: datetime
    what: str
    resets_at: datetime | None
    error: GatewayError


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    """A request settled into budget ``budget_id``'s window: ``cost_usd`` is the window's
    settled dollars now."""

    budget_id: str
    cost_usd: Decimal


@dataclass(frozen=True, slots=True, kw_only=True)
class Threshold:
    """A warning threshold reached, by a budget's window (:class:`BudgetThreshold`) or a
    task (:class:`TaskThreshold`): ``threshold`` percent of its ``limit``
    (``request_limit``, ``token_limit``, ``cost_limit_usd``; value ``limit_value``) used;
    ``spent`` and ``held`` in the limit's unit (requests, tokens, US dollars),
    ``fraction`` = spent / limit; ``message`` says it in words."""

    limit: str
    threshold: float
    limit_value: Decimal
    spent: Decimal
    held: Decimal
    fraction: float
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetThreshold(Threshold):
    """Budget ``budget_id`` reached a :class:`Threshold` in the window from
    ``window_start`` to ``window_end`` (``None``: lifetime)."""

    budget_id: str
    window_start: datetime
    window_end: datetime | None


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """Budget ``budget_id``'s current window has used ``fraction`` of its ``limit``."""

    budget_id: str
    limit: str
    fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskThreshold(Threshold):
    """Task ``task_id`` reached a :class:`Threshold`."""

    task_id: str


@dataclass(frozen=True, slots=True)
class McpCall:
    """A ``tools/call`` to MCP server ``server`` ended (:mod:`app.mcp.routes`):
    ``outcome`` is ``ok``, ``error`` (the tool failed), ``refused`` (by the gateway),
    ``unreachable``, ``timeout``, ``no_result`` (the server answered without one) or
    ``client_closed``."""

    server: str
    tool: str
    outcome: str
    #: The task the call was admitted on and its ledger id (``None``: refused before).
    task_id: str | None = None
    call_id: str | None = None


LATCH_SET: Channel[LatchSet] = Channel("latch_set")
EXCHANGE_STARTED: Channel[ExchangeStarted] = Channel("exchange_started")
EXCHANGE_FINISHED: Channel[ExchangeFinished] = Channel("exchange_finished")
ADMISSION_DONE: Channel[AdmissionDone] = Channel("admission_done")
LOOP_WARNED: Channel[LoopWarned] = Channel("loop_warned")
LOOP_STRUCK: Channel[LoopStruck] = Channel("loop_struck")
LOOP_NOTED: Channel[LoopNoted] = Channel("loop_noted")
GATEWAY_ANSWERED: Channel[GatewayAnswered] = Channel("gateway_answered")
COST_SETTLED: Channel[CostSettled] = Channel("cost_settled")
COST_HELD: Channel[CostHeld] = Channel("cost_held")
BUDGET_REFUSED: Channel[BudgetRefused] = Channel("budget_refused")
BUDGET_EXHAUSTED: Channel[BudgetExhausted] = Channel("budget_exhausted")
BUDGET_SPENT: Channel[BudgetSpent] = Channel("budget_spent")
BUDGET_THRESHOLD: Channel[BudgetThreshold] = Channel("budget_threshold")
BUDGET_USAGE: Channel[BudgetUsage] = Channel("budget_usage")
TASK_THRESHOLD: Channel[TaskThreshold] = Channel("task_threshold")
MCP_CALL: Channel[McpCall] = Channel("mcp_call")
