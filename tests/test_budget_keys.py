"""Budget keys: one key, a task per agent run, created on first sight from the key's
template, through real gateway processes and the official SDKs. A looping run is
stopped alone; two first requests of one run at once create one task; a revoked key is
refused at its next request. A run belongs to its key: two keys of one budget naming the
same run get two tasks, no key reaches another's task, a revoked key's run is not
continued through another key, and a task opened before the key was part of its id goes
on only through the key that opened it."""

from __future__ import annotations

import asyncio
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from app.budgets.keys import legacy_run_task_id, run_id, run_task_id
from tests.support import ADMIN_TOKEN, GatewayProcess

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def second_gateway(database_url, upstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, upstream.base_url) as gw:
        yield gw


def _api(gateway: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})


def _budget_key(api: httpx.Client, **template: object) -> tuple[str, str, str]:
    budget = f"team-{secrets.token_hex(3)}"
    assert api.post("/admin/budgets", json={"id": budget, "request_limit": 1000}).status_code == 201
    return (budget, *_key(api, budget, **template))


def _key(api: httpx.Client, budget: str, **template: object) -> tuple[str, str]:
    """Another key of ``budget``: its id and its secret."""
    r = api.post(f"/admin/budgets/{budget}/keys", json={"template": template})
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["key"]


def _ask(gateway: GatewayProcess, key: str, **headers: str) -> httpx.Response:
    """One chat completion with ``key``; ``headers`` with ``_`` for ``-`` (``x_taskgate_run``)."""
    return httpx.post(gateway.url + "/v1/chat/completions", timeout=30,
                      json={"model": "scenario:text", "messages": [{"role": "user", "content": "hi"}]},
                      headers={"authorization": f"Bearer {key}",
                               **{name.replace("_", "-"): value for name, value in headers.items()}})


def test_run_ids_and_task_ids() -> None:
    session = ("x-session-id", "session-id")
    assert run_id({"x-taskgate-run": "ci-7", "x-session-id": "s"}, session, "conv") == "ci-7"
    assert run_id({"session-id": "codex-1"}, session, "conv") == "codex-1"
    assert run_id({"x-taskgate-conversation": "c", "x-session-id": "s"}, session, "conv") == "c"
    assert run_id({}, session, "conv") == "conv"
    assert run_id({"x-taskgate-run": "  "}, session, "") == "default"
    task_id = run_task_id("team-a", "key_1", "run/with spaces?&#")
    assert re.fullmatch(r"team-a-run-run-with-spaces-[0-9a-f]{16}", task_id)  # tests/test_run_names.py: the name
    assert task_id == run_task_id("team-a", "key_1", "run/with spaces?&#")
    run = "run/with spaces?&#"
    others = {run_task_id("team-b", "key_1", run), run_task_id("team-a", "key_2", run),
              legacy_run_task_id("team-a", run)}
    assert task_id not in others and len(others) == 3


def _looping_run(gateway: GatewayProcess, key: str) -> list[int]:
    """An agent that keeps calling the same tool and getting the same result."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0,
                           default_headers={"x-session-id": "run-looping"})
    messages: list[dict] = [{"role": "user", "content": "list the files"}]
    statuses = []
    for _ in range(12):
        try:
            message = client.chat.completions.create(model="scenario:tool_call", messages=messages,
                                                     tools=TOOLS).choices[0].message
        except openai.APIStatusError as exc:
            statuses.append(exc.status_code)
            break
        statuses.append(200)
        calls = message.tool_calls or []
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]})
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "same text"} for c in calls]
    return statuses


def _finishing_run(gateway: GatewayProcess, key: str, n: int) -> list[int]:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0,
                           default_headers={"x-session-id": f"run-{n}"})
    messages: list[dict] = [{"role": "user", "content": f"task {n}"}]
    for turn in range(3):
        answer = client.chat.completions.create(model="scenario:text", messages=messages).choices[0].message
        messages += [{"role": "assistant", "content": answer.content or ""},
                     {"role": "user", "content": f"go on {turn}"}]
    return [200, 200, 200]


def test_five_runs_of_one_key_get_five_tasks_and_one_loop_stops_alone(gateway, second_gateway) -> None:
    api = _api(gateway)
    budget, key_id, key = _budget_key(api, request_limit=50, loop_guard={"identical_streak": 3})
    with ThreadPoolExecutor(5) as pool:
        looping = pool.submit(_looping_run, gateway, key)
        finishing = [pool.submit(_finishing_run, (gateway, second_gateway)[n % 2], key, n) for n in range(4)]
        loop_statuses = looping.result()
        assert [f.result() for f in finishing] == [[200, 200, 200]] * 4
    assert loop_statuses[-1] == 400 and loop_statuses.count(200) >= 2, loop_statuses  # the stop refusal
    tasks = {t["id"]: t for t in api.get("/admin/tasks", params={"budget": budget}).json()["data"]}
    assert len(tasks) == 5
    stopped = tasks.pop(run_task_id(budget, key_id, "run-looping"))
    assert (stopped["status"], stopped["stop_reason"]) == ("stopped", "repeated_tool_call")
    assert stopped["request_limit"] == 50 and stopped["loop_guard"] == {"identical_streak": 3}
    assert stopped["metadata"] == {"budget_key": key_id, "run": "run-looping"}
    assert sorted(tasks) == sorted(run_task_id(budget, key_id, f"run-{n}") for n in range(4))
    assert {(t["status"], t["admitted_requests"]) for t in tasks.values()} == {("active", 3)}
    spent = api.get(f"/admin/budgets/{budget}").json()["current"]["admitted_requests"]
    assert spent == 12 + loop_statuses.count(200)


def test_two_first_requests_of_one_run_at_once_create_one_task(gateway, second_gateway) -> None:
    api = _api(gateway)
    budget, key_id, key = _budget_key(api)

    async def both() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            rs = await asyncio.gather(*(
                client.post(gw.url + "/v1/chat/completions",
                            json={"model": "scenario:text", "messages": [{"role": "user", "content": "hi"}]},
                            headers={"authorization": f"Bearer {key}", "x-taskgate-run": "job-42"})
                for gw in (gateway, second_gateway, gateway, second_gateway)))
            return [r.status_code for r in rs]

    assert asyncio.run(both()) == [200] * 4
    tasks = api.get("/admin/tasks", params={"budget": budget}).json()["data"]
    assert [t["id"] for t in tasks] == [run_task_id(budget, key_id, "job-42")]
    assert tasks[0]["admitted_requests"] == 4
    events = api.get(f"/admin/tasks/{tasks[0]['id']}/events").json()["data"]
    assert [e["kind"] for e in events] == ["created"]


def test_anthropic_clients_and_a_revoked_key(gateway) -> None:
    api = _api(gateway)
    budget, key_id, key = _budget_key(api)
    client = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0,
                                 default_headers={"x-claude-code-session-id": "claude-1"})
    client.messages.create(model="scenario:text", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    assert api.get(f"/admin/tasks/{run_task_id(budget, key_id, 'claude-1')}").json()["admitted_requests"] == 1
    assert httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
    assert api.delete(f"/admin/budgets/{budget}/keys/{key_id}").status_code == 204
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="scenario:text", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": []},
                   headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    assert httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 401


def _tasks(api: httpx.Client, budget: str) -> dict[str, dict]:
    return {t["id"]: t for t in api.get("/admin/tasks", params={"budget": budget}).json()["data"]}


@pytest.mark.parametrize("header", ["x_taskgate_run", "x_session_id"])
def test_two_keys_of_one_budget_naming_one_run_get_two_tasks(gateway, second_gateway, header) -> None:
    """The issue's case: a second key (template request_limit 1000) was admitted on the
    first key's task (limit 2) and could exhaust it. Now each key's run has its own task,
    whichever gateway each request reaches, and the first key's stop is its own."""
    api = _api(gateway)
    budget, first_id, first = _budget_key(api, request_limit=2)
    second_id, second = _key(api, budget, request_limit=1000)
    run = {header: "job-7"}
    assert [_ask(gw, first, **run).status_code for gw in (gateway, second_gateway, gateway)] == [200, 200, 400]
    gateways = (second_gateway, gateway, second_gateway, gateway)
    assert [_ask(gw, second, **run).status_code for gw in gateways] == [200] * 4
    tasks = _tasks(api, budget)
    assert sorted(tasks) == sorted([run_task_id(budget, first_id, "job-7"), run_task_id(budget, second_id, "job-7")])
    mine, theirs = tasks[run_task_id(budget, first_id, "job-7")], tasks[run_task_id(budget, second_id, "job-7")]
    assert (mine["status"], mine["stop_reason"], mine["admitted_requests"], mine["request_limit"]) == (
        "stopped", "request_limit", 2, 2)
    assert mine["metadata"] == {"budget_key": first_id, "run": "job-7"}
    assert (theirs["status"], theirs["admitted_requests"], theirs["request_limit"]) == ("active", 4, 1000)
    assert theirs["metadata"] == {"budget_key": second_id, "run": "job-7"}


def test_a_key_cannot_reach_another_keys_task(gateway, second_gateway) -> None:
    """Whatever a key names as its run (the other key's run, its task id, its legacy
    task id), it lands on a task of its own; the other key's task is untouched. A task
    opened before the key was part of the id goes on through its own key only."""
    api = _api(gateway)
    budget, first_id, first = _budget_key(api, request_limit=1)
    second_id, second = _key(api, budget)
    assert _ask(gateway, first, x_taskgate_run="r").status_code == 200
    assert _ask(second_gateway, first, x_taskgate_run="r").status_code == 400  # its limit of 1: stopped
    target = run_task_id(budget, first_id, "r")
    legacy = legacy_run_task_id(budget, "old")  # as the gateway named it before, opened by the first key
    r = api.post("/admin/tasks", json={"id": legacy, "budget": budget, "request_limit": 5,
                                       "metadata": {"budget_key": first_id, "run": "old"}})
    assert r.status_code == 201, r.text
    names = ["r", target, legacy, "old", first_id]
    for n, name in enumerate(names):
        gw = (gateway, second_gateway)[n % 2]
        assert _ask(gw, second, x_taskgate_run=name).status_code == 200, name
        assert _ask(gw, second, x_session_id=name).status_code == 200, name
    assert [_ask(gw, first, x_taskgate_run="old").status_code for gw in (gateway, second_gateway)] == [200, 200]
    tasks = _tasks(api, budget)
    assert (tasks[target]["admitted_requests"], tasks[target]["status"]) == (1, "stopped")
    assert tasks[legacy]["admitted_requests"] == 2
    theirs = {run_task_id(budget, second_id, name) for name in names}
    assert set(tasks) == {target, legacy} | theirs
    assert {tasks[t]["admitted_requests"] for t in theirs} == {2}
    assert {tasks[t]["metadata"]["budget_key"] for t in theirs} == {second_id}


def test_a_revoked_keys_run_is_not_continued_through_another_key(gateway, second_gateway) -> None:
    api = _api(gateway)
    budget, first_id, first = _budget_key(api, request_limit=5)
    second_id, second = _key(api, budget, request_limit=5)
    assert _ask(gateway, first, x_session_id="run-1").status_code == 200
    assert api.delete(f"/admin/budgets/{budget}/keys/{first_id}").status_code == 204
    assert [_ask(gw, first, x_session_id="run-1").status_code for gw in (gateway, second_gateway)] == [401, 401]
    assert [_ask(gw, second, x_session_id="run-1").status_code for gw in (second_gateway, gateway)] == [200, 200]
    tasks = _tasks(api, budget)
    assert tasks[run_task_id(budget, first_id, "run-1")]["admitted_requests"] == 1
    assert tasks[run_task_id(budget, second_id, "run-1")]["admitted_requests"] == 2
    assert len(tasks) == 2


def test_a_deleted_legacy_task_is_opened_again_under_its_derived_id(gateway) -> None:
    """Admission not finding a legacy task (an operator deleted it) forgets it: the run's
    next request opens the task named by the key (one 401 between, as for any deleted run task)."""
    api = _api(gateway)
    budget, key_id, key = _budget_key(api)
    legacy = legacy_run_task_id(budget, "old")
    assert api.post("/admin/tasks", json={"id": legacy, "budget": budget,
                                          "metadata": {"budget_key": key_id, "run": "old"}}).status_code == 201
    assert _ask(gateway, key, x_taskgate_run="old").status_code == 200
    assert api.delete(f"/admin/tasks/{legacy}").status_code in (200, 204)
    assert [_ask(gateway, key, x_taskgate_run="old").status_code for _ in range(2)] == [401, 200]
    assert list(_tasks(api, budget)) == [run_task_id(budget, key_id, "old")]
