"""Steady load on gateways through a PostgreSQL failover, and the audit of the ledger
after it (issue 37 §4): used by ``tests/test_failover.py`` (quick) and
``python -m bench.failover`` (long).

:class:`Load` runs ``workers`` clients in a thread of its own, each sending one
non-streamed chat completion after another to the gateways in turn, every request under
a fresh ``x-request-id``; a 503 is retried under the *same* id after its ``retry-after``
(as an agent retries the same call), so an admission counted for a request whose client
saw 503 shows up as that id counted twice. Every answer is recorded (:class:`Answer`).

:func:`audit` compares what the clients saw with what PostgreSQL holds: every 200's
request id is in the admission log exactly once, nothing is counted that no client was
served, every task's counters equal its 200s (requests, tokens from the responses'
usage), no ceiling or budget is passed, no hold is stranded, no task is latched below
its limits. :func:`outage` measures the time without service around a fault.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import asyncpg
import httpx

from app.db.urls import asyncpg_dsn

MODEL = "ha-model"
#: US dollars per million tokens, in and out (``priced_config``).
PER_MTOK = 100


@dataclass(frozen=True)
class Target:
    """A task the load sends to: its id, token and limits."""

    task_id: str
    token: str
    request_limit: int | None = None
    cost_limit_usd: Decimal | None = None
    budget_id: str | None = None


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: request id, task, gateway index, status, when (monotonic s),
    the usage it reported (200s) and ``retry-after`` (503s)."""

    request_id: str
    task_id: str
    gateway: int
    status: int
    at: float
    input_tokens: int = 0
    output_tokens: int = 0
    retry_after: str | None = None
    code: str | None = None


@dataclass
class Load:
    """``workers`` clients on ``gateway_urls`` sending to ``targets`` in turn."""

    gateway_urls: list[str]
    targets: list[Target]
    workers: int = 12
    #: Each client sends to one target (its own when there are as many), not to all in turn.
    pinned: bool = False
    answers: list[Answer] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next = itertools.count()

    def start(self) -> "Load":
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="failover-load", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.workers * 2, max_keepalive_connections=self.workers * 2)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            await asyncio.gather(*(self._worker(client, w) for w in range(self.workers)))

    async def _worker(self, client: httpx.AsyncClient, worker: int) -> None:
        while not self._stop.is_set():
            n = next(self._next)
            target = self.targets[worker % len(self.targets)] if self.pinned else self.targets[n % len(self.targets)]
            rid = f"ha-{worker}-{n}-{secrets.token_hex(3)}"
            gateway = n % len(self.gateway_urls)
            while not self._stop.is_set():
                answer = await self._send(client, gateway, target, rid, n)
                if answer is None:
                    await asyncio.sleep(0.2)
                    gateway = (gateway + 1) % len(self.gateway_urls)
                    continue
                self.answers.append(answer)
                if answer.status != 503:
                    break
                await asyncio.sleep(min(float(answer.retry_after or 1), 1.0) / 4)  # agents retry sooner
                gateway = (gateway + 1) % len(self.gateway_urls)

    async def _send(self, client: httpx.AsyncClient, gateway: int, target: Target, rid: str,
                    n: int) -> Answer | None:
        body = {"model": MODEL, "max_tokens": 32,
                "messages": [{"role": "user", "content": f"request {n} " + "x" * (n % 7)}]}
        try:
            r = await client.post(self.gateway_urls[gateway] + "/v1/chat/completions", json=body,
                                  headers={"authorization": f"Bearer {target.token}", "x-request-id": rid})
        except httpx.HTTPError as exc:  # a gateway must never drop a request; recorded, retried
            self.errors.append(f"{rid}: {exc!r}")
            return None
        now = time.monotonic()
        if r.status_code == 200:
            usage = r.json().get("usage") or {}
            return Answer(rid, target.task_id, gateway, 200, now, usage.get("prompt_tokens", 0),
                          usage.get("completion_tokens", 0))
        code = None
        try:
            code = (r.json().get("error") or {}).get("code")
        except ValueError:
            pass
        return Answer(rid, target.task_id, gateway, r.status_code, now, retry_after=r.headers.get("retry-after"),
                      code=code)


@dataclass
class Outage:
    """Time without service around one fault (seconds): per gateway, from its first 503
    at or after the fault to its first 200 after that (``seconds``; 0 when it answered no
    503), and the longest time no client got a 200 from any gateway (``stalled_s``: the
    requests in flight wait while their commits are reconciled); the 503s answered
    meanwhile (``refused``)."""

    seconds: dict[int, float]
    refused: int
    stalled_s: float = 0.0

    @property
    def worst_s(self) -> float:
        return max(self.seconds.values(), default=0.0)


def outage(answers: list[Answer], fault_at: float, until: float) -> Outage:
    """:class:`Outage` of the answers between ``fault_at`` and ``until`` (monotonic s)."""
    seconds: dict[int, float] = {}
    refused = 0
    by_gateway: dict[int, list[Answer]] = defaultdict(list)
    window = sorted((a for a in answers if fault_at <= a.at <= until), key=lambda a: a.at)
    for a in window:
        by_gateway[a.gateway].append(a)
        refused += a.status == 503
    for gateway, seen in by_gateway.items():
        first_503 = next((a.at for a in seen if a.status == 503), None)
        if first_503 is None:
            seconds[gateway] = 0.0
            continue
        back = next((a.at for a in seen if a.status == 200 and a.at > first_503), None)
        seconds[gateway] = (back if back is not None else until) - first_503
    served = [fault_at] + [a.at for a in window if a.status == 200] + [until]
    stalled = max((b - a for a, b in zip(served, served[1:])), default=0.0)
    return Outage(seconds, refused, stalled)


@dataclass
class Audit:
    """What :func:`audit` found; ``problems`` empty when the ledger is exact."""

    served: int = 0
    lost: int = 0
    counted_twice: int = 0
    counted_unserved: int = 0
    problems: list[str] = field(default_factory=list)


async def _rows(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=30)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def rows(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    return asyncio.run(_rows(url, query, *args))


def settled(url: str, task_ids: list[str], timeout: float = 90) -> None:
    """Wait until no hold of ``task_ids`` is left, every admission of theirs is marked
    settled (``settled_at``: its settlement landed, retried through the outage by a
    gateway's backlog) and their counters stop moving. The counters alone are not
    enough: a backlogged settlement is retried every ~2 s (up to 2.4 s, plus its round's
    statement timeout), so counters unchanged for one ~1 s poll said nothing of it."""
    deadline = time.monotonic() + timeout
    last: list[Any] | None = None
    while time.monotonic() < deadline:
        try:
            waiting = rows(url, "SELECT count(*) AS n FROM reservations WHERE task_id = ANY($1)", task_ids)[0]["n"]
            waiting += rows(url, "SELECT count(*) AS n FROM admissions WHERE task_id = ANY($1) AND settled_at IS NULL",
                          task_ids)[0]["n"]
            now = [tuple(r) for r in rows(url, "SELECT id, input_tokens, output_tokens, cost_usd FROM tasks"
                                              " WHERE id = ANY($1) ORDER BY id", task_ids)]
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
            time.sleep(0.5)
            continue
        if waiting == 0 and now == last:
            return
        last = now
        time.sleep(1.0)


def audit(url: str, load: Load) -> Audit:
    """Compare the load's answers with the database at ``url`` (see the module docstring)."""
    found = Audit()
    targets = {t.task_id: t for t in load.targets}
    ids = list(targets)
    served = {a.request_id: a for a in load.answers if a.status == 200}
    found.served = len(served)
    logged = rows(url, "SELECT request_id, task_id FROM admissions WHERE task_id = ANY($1)", ids)
    per_id = Counter(r["request_id"] for r in logged)
    found.lost = sum(1 for rid in served if per_id[rid] == 0)
    found.counted_twice = sum(1 for n in per_id.values() if n > 1)
    found.counted_unserved = sum(1 for rid in per_id if rid not in served)
    if found.lost:
        found.problems.append(f"{found.lost} requests answered 200 are not in the admission log")
    if found.counted_twice:
        found.problems.append(f"{found.counted_twice} request ids counted more than once: "
                              f"{[rid for rid, n in per_id.items() if n > 1][:5]}")
    if found.counted_unserved:
        found.problems.append(f"{found.counted_unserved} admissions no client was served: "
                              f"{[rid for rid in per_id if rid not in served][:5]}")
    tasks = {r["id"]: r for r in rows(url, "SELECT * FROM tasks WHERE id = ANY($1)", ids)}
    logged_per_task = Counter(r["task_id"] for r in logged)
    for task_id, target in targets.items():
        task = tasks[task_id]
        mine = [a for a in served.values() if a.task_id == task_id]
        if task["admitted_requests"] != logged_per_task[task_id] or task["admitted_requests"] != len(mine):
            found.problems.append(f"task {task_id}: admitted_requests {task['admitted_requests']}, "
                                  f"{logged_per_task[task_id]} in the log, {len(mine)} answered 200")
        tokens = (sum(a.input_tokens for a in mine), sum(a.output_tokens for a in mine))
        if (task["input_tokens"], task["output_tokens"]) != tokens:
            found.problems.append(f"task {task_id}: tokens {(task['input_tokens'], task['output_tokens'])} "
                                  f"counted, {tokens} in the 200s' usage")
        if target.request_limit is not None and task["admitted_requests"] > target.request_limit:
            found.problems.append(f"task {task_id}: {task['admitted_requests']} admitted past its limit "
                                  f"{target.request_limit}")
        if target.cost_limit_usd is not None and task["cost_usd"] > target.cost_limit_usd:
            found.problems.append(f"task {task_id}: ${task['cost_usd']} spent past its ${target.cost_limit_usd}")
        if task["reserved_usd"] != 0:
            found.problems.append(f"task {task_id}: ${task['reserved_usd']} still reserved")
        if task["status"] == "stopped":
            reason = task["stop_reason"]
            if reason == "request_limit" and task["admitted_requests"] != target.request_limit:
                found.problems.append(f"task {task_id} latched request_limit at {task['admitted_requests']} of "
                                      f"{target.request_limit}")
            elif reason not in ("request_limit", "cost_limit"):
                found.problems.append(f"task {task_id} latched {reason}")
    holds = rows(url, "SELECT count(*) AS n FROM reservations WHERE task_id = ANY($1)", ids)[0]["n"]
    if holds:
        found.problems.append(f"{holds} holds stranded")
    budgets = {t.budget_id for t in targets.values() if t.budget_id}
    for w in rows(url, "SELECT budget_id, reserved_usd FROM budget_windows WHERE budget_id = ANY($1)", list(budgets)):
        if w["reserved_usd"] != 0:
            found.problems.append(f"budget {w['budget_id']}: ${w['reserved_usd']} still reserved")
    for b in rows(url, "SELECT b.id, b.request_limit, b.cost_limit_usd, sum(t.admitted_requests) AS requests,"
                       " sum(t.cost_usd) AS cost_usd FROM budgets b JOIN tasks t ON t.budget_id = b.id"
                       " WHERE b.id = ANY($1) GROUP BY b.id", list(budgets)):
        if b["request_limit"] is not None and b["requests"] > b["request_limit"]:
            found.problems.append(f"budget {b['id']}: {b['requests']} requests past its {b['request_limit']}")
        if b["cost_limit_usd"] is not None and b["cost_usd"] > b["cost_limit_usd"]:
            found.problems.append(f"budget {b['id']}: ${b['cost_usd']} spent past its ${b['cost_limit_usd']}")
    return found
