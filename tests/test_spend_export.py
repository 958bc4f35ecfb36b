"""Spend you can export (issue 38 item 5): ``GET /admin/spend`` and ``taskgate spend``.

- Every statement that settles a response on its task also writes its spend row
  (``spend_daily``), with the request counted once, also without usage; a free
  endpoint's request (``model`` None) is not counted (real PostgreSQL).
- Through two real gateways and the scripted upstream, concurrent traffic on two priced
  models under a team with two projects (a dollar ceiling: holds settled window by
  window; no dollars: escrow leases, two windows), a budget of its own (one window: the
  window settles in the task's statement) with a budget key's run, and a task with no
  budget: the export per budget equals each budget's own totals to the cent (dollars,
  tokens, requests), per task the tasks' counters; pages, CSV and JSON lines agree.
- Bad input is a 422 with a sentence, never a 5xx.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import secrets
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from click.testing import CliRunner

from app.admin.errors import AdminError
from app.admin.spend import keys_of, query, span
from app.admission.cost import Settlement
from app.admission.cost import dollars as dollar_text
from app.cli import main
from app.settings import Settings
from app.settlement.response import record_response
from app.testing.upstream import UpstreamServer
from app.wire.base import ResponseSummary, ToolCall, Usage
from tests.support import ADMIN_TOKEN, GatewayProcess, sql, started

pytestmark = pytest.mark.timeout(600)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TEXT, TOOL, ERROR = "scenario:text", "scenario:tool_call", "scenario:error"
_CONFIG = """
providers:
  main:
    kind: openai
    base_url: {upstream}/v1
models:
  - name: "{text}"
    provider: main
    price: {{input_per_mtok: 250, output_per_mtok: 1000}}
  - name: "{tool}"
    provider: main
    price: {{input_per_mtok: 370, output_per_mtok: 1330}}
  - name: "{error}"
    provider: main
    price: {{input_per_mtok: 250, output_per_mtok: 1000}}
"""


def test_group_by_and_days_are_checked_with_a_sentence() -> None:
    today = date(2026, 12, 4)
    assert span(None, None, today) == (date(2026, 11, 5), today)
    assert span("2026-12-01T23:30:00-02:00", "2026-12-03", today) == (date(2026, 12, 2), date(2026, 12, 3))
    assert span(None, "0001-01-02", today) == (date.min, date(1, 1, 2))  # no overflow
    for args, words in ((("2026-12-05", "2026-12-04"), "is after"), (("2025-01-01", "2026-12-04"), "at most 366"),
                        (("yesterday", None), "ISO 8601"), (("9999-12-31T23:59:59-05:00", None), "ISO 8601")):
        with pytest.raises(AdminError) as err:
            span(*args, today)
        assert err.value.status == 422 and words in err.value.message
    assert keys_of("budget, day,budget") == ["budget", "day"] and keys_of("") == []
    with pytest.raises(AdminError) as err:
        keys_of("task,project")
    assert err.value.status == 422 and "key 2 is not a key to group by" in err.value.message
    assert "LEFT JOIN chain" in query(["budget"]) and "JOIN tasks" in query(["run"])
    assert "GROUP BY" not in query([])


SUMMARIES = {
    "usage only": ResponseSummary(usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True),
    "text answer": ResponseSummary(usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True,
                                   text_sha256="a" * 64),
    "tool calls": ResponseSummary(tool_calls=[ToolCall("call_spend_1", "read_file", {"path": "a.py"})],
                                  usage=Usage(input_tokens=10, output_tokens=5), terminal_seen=True),
}


@pytest.mark.parametrize("in_window", [False, True])
@pytest.mark.parametrize("kind", list(SUMMARIES))
async def test_every_settling_statement_writes_the_spend_row(pool, database_url, kind, in_window) -> None:
    budget = f"spend-{secrets.token_hex(4)}"
    await pool.execute("INSERT INTO budgets (id, request_limit) VALUES ($1, 100)", budget)
    await pool.execute("INSERT INTO budget_windows (budget_id, window_start) VALUES ($1, $2)", budget, EPOCH)
    task_id = f"spend-task-{secrets.token_hex(4)}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, budget_id) VALUES ($1, $1, 10, $2)",
                       task_id, budget)
    settings = Settings(database_url=database_url, _env_file=None)  # type: ignore[call-arg]
    for _ in range(2):
        await record_response(pool, task_id, "s:spend", SUMMARIES[kind], settings,
                              Settlement(Decimal("0.25"), Decimal(0)), model="m",
                              budget_window=(budget, EPOCH) if in_window else None)
    await record_response(pool, task_id, "s:spend", ResponseSummary(), settings, model="")  # no usage: counted
    await record_response(pool, task_id, "s:spend", SUMMARIES["usage only"], settings)  # not admitted: not counted
    rows = await pool.fetch("SELECT model, budget_id, requests, input_tokens, output_tokens, cost_usd, day"
                            " FROM spend_daily WHERE task_id = $1 ORDER BY model", task_id)
    today = datetime.now(timezone.utc).date()
    assert [tuple(r) for r in rows] == [("", budget, 1, 0, 0, Decimal(0), today),
                                        ("m", budget, 2, 20, 10, Decimal("0.50"), today)]


async def test_a_parent_cycle_written_past_the_api_neither_hangs_nor_counts_twice(pool) -> None:
    """The budget rollup walks parents with UNION: a budget made its own parent by hand
    (tests/test_lease_statements.py does so in the session's database) ends the walk; with
    UNION ALL the export ran until the database timeout, 503 every time."""
    looped, child = f"loop-{secrets.token_hex(4)}", f"loop-kid-{secrets.token_hex(4)}"
    await pool.execute("INSERT INTO budgets (id) VALUES ($1)", looped)
    await pool.execute("UPDATE budgets SET parent_id = id WHERE id = $1", looped)
    await pool.execute("INSERT INTO budgets (id, parent_id, depth) VALUES ($1, $2, 2)", child, looped)
    day = date(2001, 2, 3)  # a day no other test spends on
    for budget in (looped, child):
        task_id = f"{budget}-task"
        await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, budget_id) VALUES ($1, $1, 10, $2)",
                           task_id, budget)
        await pool.execute("INSERT INTO spend_daily (day, task_id, model, budget_id, requests, input_tokens,"
                           " output_tokens, cost_usd) VALUES ($1, $2, 'm', $3, 3, 0, 0, 0)", day, task_id, budget)
    rows = await pool.fetch(query(["budget"]), day, day, 100, 0, timeout=5)
    assert {r["budget"]: r["requests"] for r in rows} == {looped: 6, child: 3}


# --- through real gateways ---------------------------------------------------------


@pytest.fixture(scope="module")
def spend_upstream() -> Iterator[UpstreamServer]:
    with UpstreamServer() as server:
        yield server


@pytest.fixture(scope="module")
def gateways(database_url: str, spend_upstream: UpstreamServer,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    config = Path(tmp_path_factory.mktemp("spend")) / "taskgate.yaml"
    config.write_text(_CONFIG.format(upstream=spend_upstream.base_url, text=TEXT, tool=TOOL, error=ERROR))
    with started([GatewayProcess(database_url, spend_upstream.base_url, TASKGATE_CONFIG=str(config),
                                 TASKGATE_DATABASE_TIMEOUT_S="30") for _ in range(2)]) as procs:
        yield procs


def _api(gw: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=gw.url, timeout=60, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})


def _created(r: httpx.Response) -> dict:
    assert r.status_code == 201, r.text
    return r.json()


async def _traffic(jobs: list[tuple[str, dict[str, str], str, bool]]) -> list[httpx.Response]:
    """One chat completion per ``(gateway url, headers, model, stream)``, all at once."""
    async with httpx.AsyncClient(timeout=120) as client:
        async def one(i: int, url: str, headers: dict[str, str], model: str, stream: bool) -> httpx.Response:
            body = {"model": model, "stream": stream, "max_tokens": 100,
                    "messages": [{"role": "user", "content": f"job {i}"}]}
            return await client.post(url + "/v1/chat/completions", json=body, headers=headers)
        return await asyncio.gather(*(one(i, *job) for i, job in enumerate(jobs)))


def _page(api: httpx.Client, **params: object) -> dict:
    r = api.get("/admin/spend", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _wait_settled(api: httpx.Client, by: str, ids: list[str], requests: int, today: date,
                  timeout: float = 30) -> None:
    """Until the requests of the budgets or tasks (``by``) ``ids`` are all in the spend record
    (settled after their last byte)."""
    deadline = time.monotonic() + timeout
    params = {"group_by": by, "from": (today - timedelta(days=1)).isoformat(), "limit": 10_000}
    while sum(r["requests"] for r in _page(api, **params)["data"] if r[by] in ids) < requests:
        assert time.monotonic() < deadline, _page(api, **params)
        time.sleep(0.1)


def test_the_export_matches_the_budgets_to_the_cent_after_concurrent_traffic(gateways, database_url) -> None:
    api = _api(gateways[0])
    team = _created(api.post("/admin/budgets", json={"id": f"team-{secrets.token_hex(3)}"}))["id"]
    dollars = _created(api.post("/admin/budgets", json={"id": f"dollars-{secrets.token_hex(3)}", "parent": team,
                                                        "cost_limit_usd": 10_000}))["id"]
    leased = _created(api.post("/admin/budgets", json={"id": f"leased-{secrets.token_hex(3)}", "parent": team,
                                                       "request_limit": 10_000}))["id"]
    solo = _created(api.post("/admin/budgets", json={"id": f"solo-{secrets.token_hex(3)}",
                                                     "request_limit": 10_000}))["id"]
    tokens = {b: [_created(api.post("/admin/tasks", json={"budget": b}))["token"] for _ in range(3)]
              for b in (dollars, leased, solo)}
    lone = _created(api.post("/admin/tasks", json={}))
    tokens["none"] = [lone["token"]]
    key = _created(api.post(f"/admin/budgets/{solo}/keys", json={"template": {}}))["key"]
    jobs = []
    for i in range(96):
        owner = (dollars, leased, solo, "none")[i % 4]
        token = tokens[owner][i % len(tokens[owner])]
        headers = {"authorization": f"Bearer {token}"}
        if owner == solo and i % 8 == 2:
            headers = {"authorization": f"Bearer {key}", "x-taskgate-run": "nightly-7"}
        jobs.append((gateways[i % 2].url, headers, (TEXT, TOOL)[i // 4 % 2], i % 3 == 0))
    # upstream fails (500, no usage): admitted and counted by the budgets, so in the export too
    jobs += [(gateways[i % 2].url, {"authorization": f"Bearer {tokens[(leased, dollars)[i % 2]][i % 3]}"}, ERROR,
              i % 4 == 0) for i in range(8)]
    responses = asyncio.run(_traffic(jobs))
    statuses = [r.status_code for r in responses]
    assert statuses == [200] * 96 + [500] * 8, [r.text for r in responses if r.status_code not in (200, 500)]

    today = datetime.now(timezone.utc).date()
    _wait_settled(api, "budget", [team, solo], 80, today)
    _wait_settled(api, "task", [lone["id"]], 24, today)
    days = {"from": (today - timedelta(days=1)).isoformat(), "to": today.isoformat()}
    budgets = {b: api.get(f"/admin/budgets/{b}").json()["current"] for b in (team, dollars, leased, solo)}
    assert all(w["reserved_usd"] == 0 for w in budgets.values())  # every hold released
    by_budget = {r["budget"]: r for r in _page(api, group_by="budget", limit=10_000, **days)["data"]}
    windows = {r["budget_id"]: r for r in sql(database_url, "SELECT * FROM budget_windows WHERE budget_id = ANY($1)",
                                               list(budgets))}
    for b, current in budgets.items():
        row = by_budget[b]
        assert row["requests"] == current["admitted_requests"], b
        assert (row["input_tokens"], row["output_tokens"]) == (current["input_tokens"], current["output_tokens"]), b
        assert Decimal(row["cost_usd"]) == windows[b]["cost_usd"] > 0, b  # exact, not only to the cent
        assert round(Decimal(row["cost_usd"]), 2) == round(Decimal(str(current["cost_usd"])), 2), b
    assert by_budget[team]["requests"] == by_budget[dollars]["requests"] + by_budget[leased]["requests"] == 56
    # the session's database holds other tests' tasks too: what follows reads only this test's
    # (and whole exports, limit=10_000: a default page may end before them)
    ours = [api.get(f"/admin/tasks/{lone['id']}").json()]
    for b in (dollars, leased, solo):  # the key's run task included
        ours += api.get("/admin/tasks", params={"budget": b, "limit": 1000}).json()["data"]
    by_task = {r["task"]: r for r in _page(api, group_by="task", limit=10_000, **days)["data"]}
    assert by_task[lone["id"]]["requests"] == 24  # the task without a budget
    for t in ours:
        if t["admitted_requests"]:
            row = by_task[t["id"]]
            assert (row["requests"], row["input_tokens"], row["output_tokens"]) == (
                t["admitted_requests"], t["input_tokens"], t["output_tokens"])
            assert Decimal(row["cost_usd"]) == Decimal(str(t["cost_usd"])).quantize(Decimal(row["cost_usd"]))
    total = _page(api, group_by="", **days)
    assert total["data"][0] == total["total"]  # the fleet: these tasks and the test above's
    assert total["total"]["requests"] == sum(r["requests"] for r in by_task.values())
    models: dict[str, int] = {}
    for r in _page(api, group_by="task,model", limit=10_000, **days)["data"]:
        if r["task"] in {t["id"] for t in ours}:
            models[r["model"]] = models.get(r["model"], 0) + r["requests"]
    assert (models[TEXT], models[TOOL], models[ERROR]) == (48, 48, 8)
    runs = {(r["budget"], r["run"]): r["requests"]
            for r in _page(api, group_by="budget,run", limit=10_000, **days)["data"]}
    assert runs[(solo, "nightly-7")] == 12 and runs[(solo, None)] == 12

    # pages (a next link), CSV and JSON lines hold the same rows
    full = _page(api, group_by="task,model,day", limit=10_000, **days)["data"]
    paged, params = [], {"group_by": "task,model,day", "limit": 5, **days}
    page = _page(api, **params)
    while True:
        paged += page["data"]
        if not page["next"]:
            break
        r = api.get(page["next"])
        assert r.status_code == 200, r.text
        page = r.json()
    assert paged == full and len(full) > 5
    lines = api.get("/admin/spend", params={**params, "format": "jsonl"})
    assert [json.loads(x) for x in lines.text.splitlines()] == full[:5] and 'rel="next"' in lines.headers["link"]
    text = api.get("/admin/spend", params={**params, "limit": 10_000, "format": "csv"})
    assert text.headers["content-type"].startswith("text/csv")
    parsed = list(csv.DictReader(io.StringIO(text.text)))
    assert [r["task"] for r in parsed] == [r["task"] for r in full]
    assert [Decimal(r["cost_usd"]) for r in parsed] == [Decimal(r["cost_usd"]) for r in full]

    # taskgate spend: the same numbers over HTTP, as a table and as CSV
    env = {"TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN, "TASKGATE_URL": gateways[1].url}
    out = CliRunner().invoke(main, ["spend", "--group-by", "budget", "--from", days["from"]], env=env)
    assert out.exit_code == 0, out.output
    assert team in out.output and dollar_text(Decimal(by_budget[team]["cost_usd"])) in out.output
    out = CliRunner().invoke(main, ["spend", "--group-by", "budget", "--from", days["from"], "--csv"], env=env)
    assert out.exit_code == 0, out.output
    rows = {r["budget"]: r for r in csv.DictReader(io.StringIO(out.output))}
    assert Decimal(rows[team]["cost_usd"]) == Decimal(by_budget[team]["cost_usd"])


def test_bad_input_is_a_422_with_a_sentence(gateways) -> None:
    api = _api(gateways[1])
    for params, words in (({"group_by": "budget,project"}, "key 2 is not a key to group by"),
                          ({"from": "2026-12-05", "to": "2026-12-01"}, "is after"),
                          ({"from": "2020-01-01", "to": "2026-12-01"}, "at most 366 days"),
                          ({"from": "12/01/2026"}, "ISO 8601"),
                          ({"format": "xml"}, "format"), ({"limit": 0}, "limit")):
        r = api.get("/admin/spend", params=params)
        assert r.status_code == 422, (params, r.text)
        assert words in r.json()["error"]["message"], (params, r.text)
    assert httpx.get(gateways[1].url + "/admin/spend").status_code == 401
