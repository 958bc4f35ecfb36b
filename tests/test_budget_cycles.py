"""A parent cycle written past the admin API (which nests a budget only under an existing
one, one level deeper) must not hang the walks up a task's budget chain: the escrow
lease's first sight of a task (``lease_first_by_token``/``_by_id``), the locked path's
chain (``budget_chain``) and the pause lookup of a task's open requests
(``budget_paused_tasks``). Each walk ends at the cycle, so a task under it is admitted or
refused with a sentence, never answered 503 after the database's statement timeout.

Each test closes a cycle of its own (two budgets, each the other's parent) and opens it
again at the end; the session's database also holds a budget that is its own parent
(``tests/test_lease_statements.py``)."""

from __future__ import annotations

import secrets
from typing import Iterator

import asyncpg
import httpx
import pytest

from app.budgets import escrow, pause
from tests.support import Admin, GatewayProcess, sql

#: A priced model (the built-in table): the locked case has a dollar ceiling.
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(params=["leased", "locked"])
def cycle(request: pytest.FixtureRequest, gateway: GatewayProcess, admin: Admin) -> Iterator[tuple[str, str]]:
    """(root, child): the child nested in the root through the API, then the root's parent
    set to the child past it. ``leased``: request limits only (the escrow lease's fast
    path); ``locked``: a dollar ceiling on the root (the locked path)."""
    tag = secrets.token_hex(4)
    root, child = f"cycle-root-{tag}", f"cycle-child-{tag}"
    dollars = {"cost_limit_usd": 50} if request.param == "locked" else {}
    for body in ({"id": root, "request_limit": 1000, **dollars}, {"id": child, "parent": root, "request_limit": 1000}):
        r = admin.http.post("/admin/budgets", json=body)
        assert r.status_code == 201, r.text
    url = gateway.env["TASKGATE_DATABASE_URL"]
    sql(url, "UPDATE budgets SET parent_id = $1 WHERE id = $2", child, root)
    try:
        yield root, child
    finally:
        sql(url, "UPDATE budgets SET parent_id = NULL WHERE id = $1", root)


def _ask(gateway: GatewayProcess, token: str) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, timeout=30,
                      headers={"authorization": f"Bearer {token}"})


def test_tasks_under_a_cycle_are_admitted_then_refused_by_a_pause(gateway, admin, cycle) -> None:
    """A task under either budget of the cycle: its first request (first sight), the next
    ones (the remembered chain) are admitted; once the root is paused, refused with the
    ``budget_paused`` sentence. Never a 5xx (a walk running to the statement timeout)."""
    root, child = cycle
    tokens = {budget: admin.create_task(budget=budget, request_limit=10)[1] for budget in (child, root)}
    for budget, token in tokens.items():
        for i in range(3):
            r = _ask(gateway, token)
            assert r.status_code == 200, (budget, i, r.status_code, r.text)
    r = admin.http.post(f"/admin/budgets/{root}/pause", json={"reason": "cycle test"})
    assert r.status_code == 200, r.text
    for budget, token in tokens.items():
        r = _ask(gateway, token)
        assert r.status_code == 400 and r.json()["error"]["code"] == "budget_paused", (budget, r.text)
        assert f"Budget '{root}'" in r.json()["error"]["message"], r.text


async def test_the_chain_and_the_pause_lookup_end_at_the_cycle(pool: asyncpg.Pool, admin, cycle) -> None:
    """``budget_chain`` from either budget lists each budget once; ``budget_paused_tasks``
    finds the paused root for a task under either. Under a 3 s statement timeout (a walk
    that loops would run into it)."""
    root, child = cycle
    tasks = {budget: admin.create_task(budget=budget)[0] for budget in (child, root)}
    assert admin.http.post(f"/admin/budgets/{root}/pause", json={"reason": "cycle test"}).status_code == 200
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL statement_timeout = '3s'")
        for budget in (child, root):
            ids = [r["id"] for r in await conn.fetch(escrow.CHAIN, budget)]
            assert ids[-1] == budget and len(ids) == len(set(ids)) and set(ids) <= {root, child}, (budget, ids)
        paused = {r["task_id"]: r for r in await conn.fetch(pause.PAUSED_TASKS, list(tasks.values()))}
    assert {t: (r["id"], r["own"]) for t, r in paused.items()} == {
        tasks[child]: (root, child), tasks[root]: (root, root)}
