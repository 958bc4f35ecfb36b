"""Warning thresholds of a task (issue 38 item 1, the task's half), on real PostgreSQL
and real gateway processes with the openai SDK as the agent and a loopback webhook
receiver:

- a task with request_limit 10 taking 8 requests through 2 gateways at once sends one
  webhook for 50 % and one for 80 % (none for 95 %), two ``task_warning`` events (in words
  in ``taskgate tasks events``), the crossings in ``GET /admin/tasks/{id}`` and
  ``taskgate_task_warnings_total``; raising the limit re-arms them (once at the new value);
- eight concurrent checks of one crossing announce it once (the insert decides);
- thresholds outside 0–100, repeated or too many: 422; ``[]`` and ``null``;
- the CLI's ``--thresholds``; the sentences.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Iterator

import httpx
import openai
import pytest

from app import events
from app.budgets import task_thresholds
from app.budgets.task_thresholds import TaskUsage, crossed, sentence
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess, started
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def receiver() -> Receiver:
    return Receiver()


@pytest.fixture(scope="module")
def pair(database_url, upstream, receiver) -> Iterator[list[GatewayProcess]]:
    hooked = {"TASKGATE_STOP_WEBHOOK_URL": receiver.url}
    with started([GatewayProcess(database_url, upstream.base_url, **hooked),
                  GatewayProcess(database_url, upstream.base_url, **hooked)]) as procs:
        yield procs


def _ask(url: str, token: str) -> None:
    openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}])


def _posts(receiver: Receiver, task: str) -> list[dict]:
    return [p["body"] for p in receiver.posts if p["body"].get("task_id") == task
            and p["body"]["event"] == "task.threshold"]


def _wait_posts(receiver: Receiver, task: str, count: int, timeout: float = 15) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(_posts(receiver, task)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return _posts(receiver, task)


def _warnings_counted(gateways: list[GatewayProcess], threshold: str) -> float:
    line = f'taskgate_task_warnings_total{{limit="request_limit",threshold="{threshold}"}} '
    return sum(float(x.split()[-1]) for gw in gateways for x in httpx.get(gw.url + "/metrics").text.splitlines()
               if x.startswith(line))


def test_crossing_50_and_80_percent_through_2_gateways_sends_one_webhook_each(pair, receiver):
    a, b = pair
    admin = Admin(a.url)
    counted = {t: _warnings_counted(pair, t) for t in ("50", "80")}
    task, token = admin.create_task(id=f"tw-{secrets.token_hex(4)}", request_limit=10)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: _ask((a, b)[i % 2].url, token), range(8)))  # 80 %
    _wait_posts(receiver, task, 2)
    time.sleep(4)  # both gateways checked again, several times (RECHECK_S = 3)
    posts = _posts(receiver, task)
    assert sorted(p["threshold"] for p in posts) == [50, 80], posts
    eighty = next(p for p in posts if p["threshold"] == 80)
    assert eighty["limit"] == "request_limit" and eighty["limit_value"] == 10
    assert eighty["spent"] == 8 and eighty["held"] == 0 and eighty["fraction"] == 0.8
    assert eighty["message"] == f"Task '{task}' has used 80 % of its request_limit: 8 of 10 requests admitted."
    assert eighty["text"] == f"taskgate: {eighty['message']}"
    fifty = next(p for p in posts if p["threshold"] == 50)
    assert re.fullmatch(rf"Task '{task}' has used 50 % of its request_limit: [5-8] of 10 requests admitted\.",
                        fifty["message"]), fifty["message"]
    warned = [e for e in admin.events(task) if e["kind"] == "task_warning"]
    assert [(e["reason"], e["detail"]["threshold"]) for e in warned] == [("request_limit", 50), ("request_limit", 80)]
    assert warned[1]["message"] == eighty["message"]
    shown = admin.task(task)
    assert [(w["limit"], w["threshold"]) for w in shown["warnings"]] == [("request_limit", 50), ("request_limit", 80)]
    assert shown["thresholds"] == [50, 80, 95]
    assert {t: _warnings_counted(pair, t) - counted[t] for t in counted} == {"50": 1, "80": 1}

    # a raised limit re-arms: 8 of 20 is 40 %, 10 of 20 crosses 50 % again, once
    assert admin.http.patch(f"/admin/tasks/{task}", json={"request_limit": 20}).status_code == 200
    assert admin.task(task)["warnings"] == []
    for i in range(2):
        _ask((a, b)[i].url, token)
    _wait_posts(receiver, task, 3)
    time.sleep(2)
    later = [p for p in _posts(receiver, task) if p["limit_value"] == 20]
    assert [(p["threshold"], p["spent"]) for p in later] == [(50, 10)], _posts(receiver, task)


def test_a_100_percent_crossing_says_the_next_request_is_refused(pair, receiver):
    a, _ = pair
    admin = Admin(a.url)
    task, token = admin.create_task(request_limit=3, thresholds=[100])
    for _ in range(3):
        _ask(a.url, token)
    [post] = _wait_posts(receiver, task, 1)
    assert post["threshold"] == 100 and post["spent"] == 3
    assert post["message"].endswith("Its next request is refused: raise the limit (and resume the task) to go on.")


def test_no_thresholds_no_warning(pair, receiver):
    a, _ = pair
    admin = Admin(a.url)
    task, token = admin.create_task(request_limit=2, thresholds=[])
    for _ in range(2):
        _ask(a.url, token)
    time.sleep(2.5)
    assert _posts(receiver, task) == []
    assert [e for e in admin.events(task) if e["kind"] == "task_warning"] == []


async def test_concurrent_checks_announce_a_crossing_once(pool):
    """Eight checks at once, each on its own connection, over a task at 90 %: 50 and 80
    are announced once each, whatever the interleaving."""
    announced: list[events.TaskThreshold] = []
    events.TASK_THRESHOLD.subscribe(announced.append)
    try:
        task = f"c-{secrets.token_hex(4)}"
        await pool.execute("INSERT INTO tasks (id, token_hash, request_limit, admitted_requests)"
                           " VALUES ($1, $2, 10, 9)", task, secrets.token_hex(16))
        counts = await asyncio.gather(*(task_thresholds.check(pool, [task]) for _ in range(8)))
    finally:
        events.TASK_THRESHOLD.unsubscribe(announced.append)
    mine = [e.threshold for e in announced if e.task_id == task]
    assert sorted(mine) == [50, 80] and sum(counts) == 2, (mine, counts)
    rows = await pool.fetch("SELECT detail FROM task_events WHERE task_id = $1 AND kind = 'task_warning'", task)
    assert sorted(r["detail"]["threshold"] for r in rows) == [50, 80]


@pytest.mark.parametrize("bad", [[0], [101], [-5], [float(i) for i in range(1, 12)], ["a"], [True], 80, [50, None]])
def test_thresholds_outside_0_to_100_are_refused(admin, bad):
    r = admin.http.post("/admin/tasks", json={"request_limit": 10, "thresholds": bad})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert "thresholds" in error["param"] and error["message"], error
    task, _ = admin.create_task(request_limit=10)
    assert admin.http.patch(f"/admin/tasks/{task}", json={"thresholds": bad}).status_code == 422


def test_thresholds_are_kept_changed_and_reset(admin):
    task, _ = admin.create_task(request_limit=10, thresholds=[95, 60.5, 95])
    assert admin.task(task)["thresholds"] == [60.5, 95]
    assert admin.http.patch(f"/admin/tasks/{task}", json={"thresholds": []}).json()["thresholds"] == []
    assert admin.http.patch(f"/admin/tasks/{task}", json={"thresholds": None}).json()["thresholds"] == [50, 80, 95]
    changed = [e for e in admin.events(task) if e["kind"] == "limits_changed"]
    assert changed[0]["detail"]["before"] == {"thresholds": [60.5, 95]}


def test_cli_sets_and_shows_thresholds(gateway):
    from click.testing import CliRunner

    from app.cli import main

    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    task = f"cli-{secrets.token_hex(3)}"
    run = lambda *args: CliRunner().invoke(main, list(args), env=env)  # noqa: E731
    made = run("tasks", "create", "--id", task, "--request-limit", "10", "--thresholds", "90,60", "--json")
    assert made.exit_code == 0 and '"thresholds": [\n    60.0,\n    90.0\n  ]' in made.output, made.output
    assert "60 %, 90 %" in run("tasks", "show", task).output
    assert run("tasks", "update", task, "--thresholds", "none", "--json").output.count('"thresholds": []') == 1
    assert "50 %, 80 %, 95 %" in run("tasks", "update", task, "--thresholds", "default").output
    bad = run("tasks", "update", task, "--thresholds", "120")
    assert bad.exit_code != 0 and "thresholds" in bad.output


def _usage(limit: str, value: int | str, spent: int | str, held: int | str = 0) -> TaskUsage:
    return TaskUsage("x", limit, Decimal(value), Decimal(spent), Decimal(held))


def test_crossed_and_sentences():
    assert crossed(_usage("request_limit", 100, 80), (50, 80, 95), ["request_limit:50"]) == [80]
    assert crossed(_usage("request_limit", 100, 79), (50, 80, 95), []) == [50]
    assert crossed(_usage("token_limit", 1000, 1000), (100,), ["request_limit:100"]) == [100]
    assert crossed(_usage("cost_limit_usd", "2", "1.59"), (80,), []) == []
    assert sentence(_usage("request_limit", 100, 80), 80) == (
        "Task 'x' has used 80 % of its request_limit: 80 of 100 requests admitted.")
    assert sentence(_usage("token_limit", 10_000, 5_012), 50) == (
        "Task 'x' has used 50 % of its token_limit: 5,012 of 10,000 tokens reported.")
    assert sentence(_usage("cost_limit_usd", "2", "1.9", "0.05"), 95) == (
        "Task 'x' has used 95 % of its cost_limit_usd: $1.90 of $2.00 settled ($0.05 held by requests in flight).")
