"""Ledger compaction (issue 21, item 8, active tasks): rows the detector can never read
again are deleted, and no verdict changes.

Property over generated histories, on real PostgreSQL through the real ledger code: two
tasks receive the same generated agent history (responses with tool calls, requests with
their results; failures, empty results, calls left pending, parallel calls, several
conversations, a loop at a random point); one of them is compacted after every turn with
the smallest keep (the detector's window) and no age bound. Every verdict, the stop and
the counters are identical; the compacted ledger is smaller.
A real gateway process runs the job on its own (``TASKGATE_RETENTION_INTERVAL_S``) while
an agent works through it: the stop comes on the same turn as without the job."""

from __future__ import annotations

import asyncio
import random
import secrets
from dataclasses import dataclass

import httpx
import pytest

from app import retention
from app.admission.tokens import token_hash
from app.db import tasks as task_rows
from app.db.pool import create_pool
from app.guard.detector import Action, Thresholds, Verdict, window_size
from app.guard.judge import GuardRequest
from app.guard.policy import Policy
from app.ledger.tool_calls import record_request
from app.settings import Settings
from app.settlement.response import record_response
from app.wire.base import ResponseSummary, ToolCall, ToolResult
from tests.support import Admin, GatewayProcess, sql

pytestmark = pytest.mark.timeout(600)

WINDOW = window_size(Thresholds())
SEEDS = range(4)


@dataclass
class Turn:
    conversation: str
    calls: list[ToolCall]
    results: list[ToolResult]  # some calls get none: they stay pending


def _history(seed: int, turns: int = 260) -> list[Turn]:
    """Mostly varied tool use (so the ledger grows long without a stop), then at a
    random point a loop of the seed's kind: identical calls, a cycle, failures or empty
    results of one tool among other calls."""
    rng = random.Random(seed)
    loop_at = rng.randrange(150, turns - 40)
    kind = ["identical", "cycle", "failure", "empty"][seed % 4]
    out: list[Turn] = []
    loop_calls = 0
    for i in range(turns):
        conversation = rng.choice(["main", "main", "sub"])
        calls, results = [], []
        looping = i >= loop_at and conversation == "main"
        # a failure or empty-result streak counts one tool's own calls: other calls between
        # them spread it over most of the detector's window
        width = 3 if looping and kind in ("failure", "empty") else 1 if looping else rng.choice([1, 1, 1, 2, 3])
        for j in range(width):
            call_id = f"c{seed}-{i}-{j}"
            if looping and j == width - 1:
                loop_calls += 1
                name, args, output = {
                    "identical": ("read_file", '{"path": "x"}', "same"),
                    "cycle": (("ls", '{"d": 1}', "a") if loop_calls % 2 else ("cat", '{"f": 2}', "b")),
                    "failure": ("build", f'{{"n": {i}}}', f"Error: failed {i}"),
                    "empty": ("grep", f'{{"q": {i}}}', ""),
                }[kind]
            else:
                name = rng.choice(["read_file", "ls"] if looping else ["read_file", "ls", "grep", "build"])
                args = f'{{"n": {rng.randrange(10**6)}}}'
                output = rng.choice([f"out {rng.randrange(10**6)}", "", f"Error: no {i}"])
            calls.append(ToolCall(call_id, name, args))
            if rng.random() > 0.05:  # about one call in 20 never gets its result
                results.append(ToolResult(call_id, output))
        out.append(Turn(conversation, calls, results))
    return out


async def _new_task(pool) -> str:
    task_id = "tg-compact-" + secrets.token_hex(6)
    async with pool.acquire() as conn:
        await conn.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, 1000000)",
                           task_id, token_hash(task_id))
    return task_id


async def _request(pool, task_id: str, turn: Turn, settings: Settings) -> Verdict:
    async with pool.acquire() as conn, conn.transaction():
        task = await task_rows.lock_task(conn, task_id=task_id)
        assert task is not None
        guard = GuardRequest(turn.conversation, turn.calls, turn.results)
        return await record_request(conn, task, guard, Policy(task, settings))


def _key(v: Verdict | None) -> tuple | None:
    return None if v is None else (v.action, v.reason, v.count,
                                   {k: x for k, x in v.detail.items() if k != "conversation_key"})


async def _run(url: str, seed: int) -> None:
    settings = Settings(database_url=url, ledger_keep_per_conversation=1, ledger_compact_after_s=0,
                        _env_file=None)  # type: ignore[call-arg]
    pool = await create_pool(url, settings)
    try:
        plain, compacted = await _new_task(pool), await _new_task(pool)
        deleted = 0
        for n, turn in enumerate(_history(seed)):
            verdicts = []
            for task_id in (plain, compacted):
                summary = ResponseSummary(tool_calls=turn.calls, terminal_seen=True)
                after_response = await record_response(pool, task_id, turn.conversation, summary, settings)
                after_request = await _request(pool, task_id, turn, settings)
                verdicts.append((_key(after_response), _key(after_request)))
                if task_id == compacted:
                    deleted += await retention.compact_task(pool, compacted, settings) or 0
            assert verdicts[0] == verdicts[1], (seed, n, verdicts)
            stops = [v for pair in verdicts for v in pair if v is not None and v[0] is Action.STOP]
            if stops:
                break
        else:
            raise AssertionError(f"seed {seed}: the generated loop never stopped the task")
        rows = {t: await pool.fetchrow(
            "SELECT tk.tool_calls, tk.status, tk.stop_reason, (SELECT count(*) FROM tool_calls c"
            " WHERE c.task_id = tk.id) AS ledger FROM tasks tk WHERE tk.id = $1", t) for t in (plain, compacted)}
        a, b = rows[plain], rows[compacted]
        assert (a["tool_calls"], a["stop_reason"]) == (b["tool_calls"], b["stop_reason"])
        assert deleted > 0 and b["ledger"] == a["ledger"] - deleted, (dict(a), dict(b), deleted)
        print(f"seed {seed}: stopped at turn {n} ({stops[0][1]}), ledger {a['ledger']} rows "
              f"vs {b['ledger']} compacted ({deleted} deleted)")
    finally:
        await pool.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_compaction_never_changes_a_verdict(database_url, seed):
    asyncio.run(_run(database_url, seed))


def _agent_turns(gateway: GatewayProcess, upstream, token: str, distinct: int) -> int:
    """``distinct`` different tool calls, then the same call with the same result until
    the task is refused; returns the number of the refused request."""
    h = {"authorization": f"Bearer {token}"}
    messages: list[dict] = [{"role": "user", "content": "go"}]
    for n in range(1, distinct + 20):
        same = n > distinct
        upstream.script("tool_call", name="read_file", arguments={"path": "same" if same else f"f{n}"})
        r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "mock-model", "messages": messages},
                       headers=h, timeout=30)
        if r.status_code != 200:
            assert r.json()["error"]["code"] == "repeated_tool_call", r.text
            return n
        message = r.json()["choices"][0]["message"]
        call = message["tool_calls"][0]
        messages += [message, {"role": "tool", "tool_call_id": call["id"], "content": "same" if same else f"r{n}"}]
        messages = messages[:1] + messages[-8:]  # agents trim their context; the ledger keeps the calls
    raise AssertionError("never refused")


def test_a_gateway_compacts_while_an_agent_works_and_stops_it_on_the_same_turn(database_url, upstream):
    env = {"TASKGATE_RETENTION_INTERVAL_S": "0.2", "TASKGATE_LEDGER_KEEP_PER_CONVERSATION": "1",
           "TASKGATE_LEDGER_COMPACT_AFTER_S": "0"}
    distinct = WINDOW + 40
    with GatewayProcess(database_url, upstream.base_url, **env) as gw:
        admin = Admin(gw.url)
        task_id, token = admin.create_task()
        refused_at = _agent_turns(gw, upstream, token, distinct)
        task = admin.task(task_id)
        rows = sql(database_url, "SELECT count(*) AS n FROM tool_calls WHERE task_id = $1", task_id)[0]["n"]
    with GatewayProcess(database_url, upstream.base_url) as plain_gw:
        plain_admin = Admin(plain_gw.url)
        plain_id, plain_token = plain_admin.create_task()
        assert _agent_turns(plain_gw, upstream, plain_token, distinct) == refused_at
        plain = plain_admin.task(plain_id)
    assert (task["tool_calls"], task["stop_reason"]) == (plain["tool_calls"], plain["stop_reason"])
    print(f"refused at request {refused_at}; ledger {rows} rows of {task['tool_calls']} calls")
    assert WINDOW <= rows <= task["tool_calls"] - 20, rows  # compacted, never below the window
