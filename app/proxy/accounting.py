"""After a relayed exchange: usage, tool calls and failures into the task's record.

Runs once the client has its last byte, except for an answer the loop guard judges
(:mod:`app.proxy.verdict`: it repeated itself, carries tool calls, or may be the same
answer again): its usage, tool calls and the guard's decision (a latch, a strike, a
warning; :mod:`app.ledger.strikes`) are written by :meth:`Accounting.verdict` before
its last byte is released, and the rest here after. Stalls and truncations become task events
(``stream_stalled``, ``stream_truncated``, ``upstream_unreachable``,
``upstream_timeout``); stalls and upstream timeouts (a non-streamed request that
ran past its ``upstream_timeout_s``) count toward the optional per-task stall
ceiling, which latches the task with ``repeated_stalls``. An answer the relay found
repeating itself (``repeated_output``) latches the task, strikes the answer or warns,
as its action says (:mod:`app.guard.strike_rules`). The request's dollars settle
(:func:`app.admission.cost.settle`) and are written with its usage, into the task, its
budget windows and the spend record, by :func:`app.settlement.exchange.settle` (once per
admission). Nothing is refunded.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Awaitable, Callable

import asyncpg

from app import events
from app.admission import anchor_rows, in_flight
from app.admission.anchor import Anchor, anchor_after
from app.admission.charge import Charge
from app.admission.cost import settle
from app.admission.holds import holds
from app.budgets.ledger import WindowKey
from app.config.schema import Price
from app.db import sql
from app.db import tasks as task_rows
from app.db.pool import relaxed
from app.guard.detector import Action, Verdict
from app.guard.strike_rules import DEFAULT_ACTIONS, answer_sentence
from app.ledger.strikes import Applied, judge_answer
from app.proxy.outcome import Outcome
from app.proxy.verdict import Ruling
from app.settings import Settings
from app.settlement.exchange import retried
from app.settlement.exchange import settle as settle_exchange

logger = logging.getLogger(__name__)

_EVENT_KINDS = {
    "stalled": "stream_stalled",
    "truncated": "stream_truncated",
    "upstream_unreachable": "upstream_unreachable",
    "upstream_timeout": "upstream_timeout",
}
_COUNT_UNMETERED = sql.statement("proxy_count_unmetered")


def _soft_rule(verdict: Verdict | None) -> str | None:
    """The soft rule (:data:`DEFAULT_ACTIONS`) a ledger verdict stops for, else ``None``."""
    if verdict is None or verdict.action is not Action.STOP or verdict.reason not in DEFAULT_ACTIONS:
        return None
    return verdict.reason


def unmetered(outcome: Outcome) -> bool:
    """Whether a finished inference exchange leaves the task's tokens unknown: upstream
    answered it in full (2xx) without reporting usage (a streamed chat completion not
    asked for usage, ``TASKGATE_STREAM_USAGE=false``, or a provider that reports none)."""
    return (outcome.kind == "completed" and outcome.summary.usage is None
            and outcome.status is not None and 200 <= outcome.status < 300)


_COUNT_STALL = sql.statement("proxy_count_stall")


@dataclass(slots=True)
class Accounting:
    """The ``on_finish`` callback of one relayed request."""

    pool: asyncpg.Pool
    settings: Settings
    task_id: str
    conversation_key: str
    guard_enabled: bool
    stream: bool = False
    count_answer: bool = False  # the request continued a conversation (repeated_response)
    seen_answer_sha256: str | None = None  # the latest answer its history showed the model
    started: float = field(default_factory=time.monotonic)
    price: Price | None = None
    reservation_usd: Decimal = Decimal(0)
    request_id: str | None = None  # into the events recorded
    metered: bool = False  # an inference POST: upstream should report its usage
    charge: Charge | None = None  # a request with a reservation: its history anchors the next one
    endpoint: str = ""  # what the exchange-finished event reports
    model: str | None = None
    provider: str | None = None
    reservation_id: int | None = None  # the hold's row, deleted as it settles
    budget_windows: tuple[WindowKey, ...] = ()  # where the request was counted
    admission_key: uuid.UUID | None = None  # its admission log row: settled once (app.db.commits.settling)
    cuts_repeating: bool = True  # a stream repeating itself is cut (its action is not warn)
    counted: bool = False  # an admitted request (not a free endpoint's): into the spend record
    _recorded: bool = field(default=False, init=False)  # usage, tool calls and verdict written (maybe early)

    def __post_init__(self) -> None:
        events.EXCHANGE_STARTED.emit(events.ExchangeStarted(self.task_id, self.stream))
        in_flight.opened(self.task_id)  # a refusal of this task waits for this record

    async def __call__(self, outcome: Outcome) -> None:
        try:
            await self._account(outcome)
        finally:
            in_flight.closed(self.task_id)

    def wants_verdict(self, outcome: Outcome) -> bool:
        """Whether the answer in ``outcome`` is judged before its last byte (see the
        module docstring); pure: what the relay parsed already, no I/O."""
        if not self.guard_enabled or self._recorded:
            return False
        summary = outcome.summary
        return bool(summary.tool_calls) or "repeated_output" in outcome.detail or (
            self.count_answer and summary.text_sha256 is not None)

    async def verdict(self, outcome: Outcome) -> Ruling | None:
        """Write the answer's usage, tool calls and the loop guard's decision on it
        before its last byte (:mod:`app.proxy.verdict`): ``repeated_output`` first (what
        the relay saw while it streamed), then the response's record (the tool-call
        ceilings, ``repeated_response``). A :class:`Ruling` when a soft rule struck the
        answer (it is cut or withheld; one answer draws one strike); ``None``: release
        it. Never raises: a failure is logged, and the answer released."""
        self._recorded = True
        struck: tuple[str, dict[str, Any]] | None = None
        try:
            repeated = outcome.detail.get("repeated_output")
            if repeated is not None:
                detail = {**repeated, "endpoint": outcome.detail.get("endpoint")}
                if await self._judge_rule("repeated_output", detail):
                    struck = ("repeated_output", detail)
            verdict = await self._record(outcome)
            soft = _soft_rule(verdict)
            if soft is not None:  # a soft rule the ledger left unlatched: its action decides
                detail = dict(verdict.detail) if verdict is not None else {}
                if await self._judge_rule(soft, detail) and struck is None:
                    struck = (soft, detail)
        except Exception:  # the answer is released; the record is best effort here
            logger.exception("judging a response of task %s before its last byte failed", self.task_id)
        if struck is None:
            return None
        rule, detail = struck
        return Ruling(rule, answer_sentence(rule, detail, streamed=self.stream,
                                            window_s=self.settings.strike_window_s))

    async def _judge_rule(self, rule: str, detail: dict[str, Any]) -> bool:
        """Apply ``rule``'s action to the answer (:func:`judge_answer`); whether it
        struck. An unreachable database leaves the write to the backlog (as a latch)."""
        judged = None

        async def judge() -> None:
            nonlocal judged
            judged = await judge_answer(self.pool, self.task_id, self.conversation_key, rule, detail,
                                        self.settings, request_id=self.request_id, streamed=self.stream)
        await self._retried(judge, f"the {rule} verdict of task {self.task_id}")
        return judged is not None and judged.applied is Applied.STRUCK

    async def _account(self, outcome: Outcome) -> None:
        summary = outcome.summary
        recorded = self._recorded
        self._recorded = True
        settlement = settle(self.price, summary.usage, self.reservation_usd)
        events.EXCHANGE_FINISHED.emit(events.ExchangeFinished(
            self.task_id, outcome, self.started, self.stream, self.endpoint, self.model, self.provider,
            self.request_id, settlement.cost_usd if settlement is not None else None, self.conversation_key))
        if not recorded:
            repeated = outcome.detail.get("repeated_output")
            if repeated is not None and self.guard_enabled:
                await self._judge_rule("repeated_output", {**repeated, "endpoint": outcome.detail.get("endpoint")})
            verdict = await self._record(outcome)
            soft = _soft_rule(verdict)
            if soft is not None and verdict is not None:
                await self._judge_rule(soft, dict(verdict.detail))
        if self.metered and unmetered(outcome):
            await self._retried(lambda: self._execute(_COUNT_UNMETERED),
                                f"the unmetered response of task {self.task_id}")
        kind = _EVENT_KINDS.get(outcome.kind)
        if kind is not None:
            await self._retried(lambda: self._record_event(kind, outcome),
                                f"the {kind} event of task {self.task_id}")

    async def _record(self, outcome: Outcome) -> Verdict | None:
        """The response's usage, dollars (settled into its budget windows) and tool calls
        (:func:`app.settlement.exchange.settle`), and the input-token anchor of its conversation;
        the ledger's verdict (``None``: nothing judged)."""
        summary = outcome.summary
        settlement = settle(self.price, summary.usage, self.reservation_usd)
        if not self.guard_enabled:
            summary.tool_calls = []
        if not (self.guard_enabled and self.count_answer):
            summary.text_sha256 = None
        settled, verdict = await settle_exchange(
            self.pool, self.settings, self.task_id, self.conversation_key, summary, settlement,
            budget_windows=self.budget_windows, reservation_id=self.reservation_id, admission_key=self.admission_key,
            request_id=self.request_id, seen_answer_sha256=self.seen_answer_sha256, model=self.model,
            counted=self.counted)
        if settled:
            usage = summary.usage
            if self.reservation_usd:
                holds.settled(self.task_id)  # requests of the task waiting here decide again now
            if self.reservation_usd and usage is not None and settlement is not None:
                events.COST_SETTLED.emit(events.CostSettled(self.task_id, self.reservation_usd, settlement.cost_usd))
            history = None
            if self.charge is not None and usage is not None and usage.input_tokens > 0:
                charge = self.charge  # hashed off the event loop unless admission did already
                history = charge.history if charge.history_known else await asyncio.to_thread(lambda: charge.history)
            if history is not None and history.items and usage is not None and usage.input_tokens > 0:
                anchor = anchor_after(history, usage.input_tokens)
                await self._retried(lambda: self._set_anchor(anchor),
                                    f"the input-token anchor of a conversation of task {self.task_id}")
        return verdict

    async def _retried(self, write: Callable[[], Awaitable[object]], what: str) -> None:
        """Run ``write``; if the database is unreachable, leave it to the backlog."""
        await retried(write, what, self.settings.accounting_retry_s)

    async def _set_anchor(self, anchor: Anchor) -> None:
        async with self.pool.acquire() as conn:
            await anchor_rows.set_anchor(conn, self.task_id, self.conversation_key, anchor)

    async def _execute(self, statement: str) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(statement, self.task_id)

    async def _record_event(self, kind: str, outcome: Outcome) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await relaxed(conn)  # a latch set below makes this commit durable again
            await task_rows.lock_task(conn, task_id=self.task_id)
            await task_rows.add_event(conn, self.task_id, kind, outcome.detail.get("code"),
                                      outcome.detail, request_id=self.request_id)
            if outcome.kind not in ("stalled", "upstream_timeout"):
                return
            stalls, max_stalls = await conn.fetchrow(_COUNT_STALL, self.task_id)
            if max_stalls and stalls >= max_stalls:
                await task_rows.set_latch(conn, self.task_id, "repeated_stalls",
                                          {"stalls": stalls, "max_stalls": max_stalls,
                                           "last_stall": outcome.detail}, request_id=self.request_id)
