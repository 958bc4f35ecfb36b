"""Runs of a budget key told apart and recognisable (issue 40 item 2).

- A run task's id names its run: ``<budget>-run-<name>-<16 hex>``, deterministic, per
  key, a valid task id for any budget id and any run (length and charset), and tasks
  opened under the ids before (without the name; before the key was in the digest) go
  on under them.
- ``/run/<name>/v1/...`` names the run in the URL, for agents that can only be given a
  base URL; through two real gateways and both wire formats.
- ``taskgate run --key`` (or ``TASKGATE_BUDGET_KEY``) opens a new run at every
  invocation, or continues the run ``--run NAME`` names; as a real subprocess starting
  a real agent script that uses the official SDKs.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from app.admin.schemas import TASK_ID_PATTERN
from app.budgets.keys import RUN_LABEL_CHARS, earlier_run_task_ids, legacy_run_task_id, run_label, run_task_id
from app.cli.run import default_run_name
from app.proxy.run_path import unprefixed
from tests.support import ADMIN_TOKEN, GatewayProcess

AGENT = Path(__file__).parent / "fixtures" / "agents" / "until_refused.py"
LONGEST_BUDGET = "b" * 64  # BUDGET_ID_PATTERN's longest
CHAT = {"model": "scenario:text", "messages": [{"role": "user", "content": "hi"}]}


# --- ids --------------------------------------------------------------------------


RUNS = ["job-42", "fix bug #7 ...", "Café déjà vu", "x" * 1000, "é" * 300, "a\x00b\ud800c", "///", "",
        "s:" + "0" * 32, "codex-20261204T104608Z-3f2a", "550e8400-e29b-41d4-a716-446655440000", "-.-_a_.-"]


@pytest.mark.parametrize("run", RUNS)
def test_a_run_task_id_is_a_valid_task_id_for_any_budget_and_run(run: str) -> None:
    for budget in ("team-a", LONGEST_BUDGET, "a"):
        task_id = run_task_id(budget, "key_0123456789abcdef", run)
        assert re.fullmatch(TASK_ID_PATTERN, task_id) and len(task_id) <= 126, task_id
        assert task_id == run_task_id(budget, "key_0123456789abcdef", run)  # every replica, every retry
        label = run_label(run)
        assert re.fullmatch(r"([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?", label) and len(label) <= RUN_LABEL_CHARS
        shape = rf"{re.escape(budget)}-run-{re.escape(label) + '-' if label else ''}[0-9a-f]{{16}}"
        assert re.fullmatch(shape, task_id), task_id


def test_a_run_task_id_names_its_run() -> None:
    assert run_task_id("team-a", "key_1", "job-42").startswith("team-a-run-job-42-")
    assert run_task_id("team-a", "key_1", "fix bug #7 ...").startswith("team-a-run-fix-bug-7-")
    assert run_task_id("team-a", "key_1", "Café déjà vu").startswith("team-a-run-Cafe-deja-vu-")
    assert run_task_id("team-a", "key_1", "x" * 1000).startswith("team-a-run-" + "x" * RUN_LABEL_CHARS + "-")
    # a run grouped by its first messages (the loop guard's conversation key) has no name to show
    assert re.fullmatch(r"team-a-run-[0-9a-f]{16}", run_task_id("team-a", "key_1", "s:" + "0" * 32))
    assert re.fullmatch(r"team-a-run-[0-9a-f]{16}", run_task_id("team-a", "key_1", "///"))


def test_run_task_ids_are_per_key_and_per_run_even_when_names_read_alike() -> None:
    ids = {run_task_id(b, k, r) for b in ("team-a", "team-b") for k in ("key_1", "key_2")
           for r in ("job 7", "job-7", "job_7 ", "a" * 60 + "1", "a" * 60 + "2")}
    assert len(ids) == 2 * 2 * 5
    assert run_task_id("team-a", "key_1", "a" * 60 + "1").rsplit("-", 1)[0] == \
        run_task_id("team-a", "key_1", "a" * 60 + "2").rsplit("-", 1)[0]  # same name part, two tasks


def test_earlier_ids_of_a_run() -> None:
    named = run_task_id("team-a", "key_1", "job")
    unnamed, legacy = earlier_run_task_ids("team-a", "key_1", "job")
    assert unnamed == "team-a-run-" + named.rsplit("-", 1)[1]  # the id before runs were named
    assert legacy == legacy_run_task_id("team-a", "job") != unnamed
    conversation = "h:" + "f" * 32
    assert earlier_run_task_ids("team-a", "key_1", conversation) == (legacy_run_task_id("team-a", conversation),)


def test_default_run_names() -> None:
    at = datetime(2026, 12, 4, 10, 46, 8, tzinfo=timezone.utc)
    assert re.fullmatch(r"codex-20261204T104608Z-[0-9a-f]{4}", default_run_name("/usr/local/bin/codex", at))
    assert re.fullmatch(r"python3\.11-20261204T104608Z-[0-9a-f]{4}", default_run_name("/usr/bin/python3.11", at))
    assert re.fullmatch(r"run-20261204T104608Z-[0-9a-f]{4}", default_run_name("./...", at))
    assert re.fullmatch(r"my-agent-\d{8}T\d{6}Z-[0-9a-f]{4}", default_run_name("my agent"))
    assert default_run_name("codex", at) != default_run_name("codex", at)  # two runs in one second


# --- /run/<name>/ in the URL -------------------------------------------------------


def _scope(path: str, raw: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    scope = {"type": "http", "path": path, "headers": headers or [(b"host", b"x")], "query_string": b"a=1"}
    if raw is not None:
        scope["raw_path"] = raw
    return scope


def test_a_run_named_in_the_path() -> None:
    out = unprefixed(_scope("/run/job-1/v1/chat/completions", b"/run/job-1/v1/chat/completions"))
    assert out is not None
    assert (out["path"], out["raw_path"], out["query_string"]) == ("/v1/chat/completions", b"/v1/chat/completions",
                                                                   b"a=1")
    assert out["headers"] == [(b"host", b"x"), (b"x-taskgate-run", b"job-1")]
    assert unprefixed(_scope("/run/job-1/mcp/time"))["path"] == "/mcp/time"  # type: ignore[index]
    # the client's own header wins; a blank one does not
    mine = unprefixed(_scope("/run/job-1/v1/models", headers=[(b"x-taskgate-run", b"ci-7")]))
    assert mine is not None and mine["headers"] == [(b"x-taskgate-run", b"ci-7")]
    blank = unprefixed(_scope("/run/job-1/v1/models", headers=[(b"x-taskgate-run", b" ")]))
    assert blank is not None and blank["headers"][-1] == (b"x-taskgate-run", b"job-1")
    # not a run name, no rest, or the name spelled with escapes: nothing rewritten
    for path in ("/run/.x/v1/models", "/run/a b/v1/models", "/run/job-1", "/run//v1/models",
                 "/run/" + "x" * 129 + "/v1/models"):
        assert unprefixed(_scope(path)) is None, path
    assert unprefixed(_scope("/run/job-1/v1/models", b"/run/job%2D1/v1/models")) is None


@pytest.fixture(scope="module")
def second_gateway(database_url, upstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, upstream.base_url) as gw:
        yield gw


def _api(gateway: GatewayProcess) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})


def _budget_key(api: httpx.Client, **template: object) -> tuple[str, str, str]:
    budget = f"runs-{secrets.token_hex(3)}"
    assert api.post("/admin/budgets", json={"id": budget, "request_limit": 1000}).status_code == 201
    r = api.post(f"/admin/budgets/{budget}/keys", json={"template": template})
    assert r.status_code == 201, r.text
    return budget, r.json()["id"], r.json()["key"]


def _tasks(api: httpx.Client, budget: str) -> dict[str, dict]:
    return {t["id"]: t for t in api.get("/admin/tasks", params={"budget": budget}).json()["data"]}


def _chat(gateway: GatewayProcess, path: str, key: str, **headers: str) -> int:
    return httpx.post(gateway.url + path, json=CHAT, timeout=30,
                      headers={"authorization": f"Bearer {key}", **headers}).status_code


def test_runs_named_in_the_path_through_two_gateways(gateway, second_gateway) -> None:
    """Same first messages, two names in the path: two tasks, each named; one name
    through both gateways and both wire formats: one task; the header wins over the path."""
    api = _api(gateway)
    budget, key_id, key = _budget_key(api, request_limit=10)
    assert [_chat(gw, "/run/job-1/v1/chat/completions", key) for gw in (gateway, second_gateway)] == [200, 200]
    r = httpx.post(second_gateway.url + "/run/job-1/v1/messages", timeout=30, headers={"x-api-key": key},
                   json={"model": "scenario:text", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert _chat(gateway, "/run/job-2/v1/chat/completions", key) == 200
    assert _chat(second_gateway, "/run/job-3/v1/chat/completions", key, **{"x-taskgate-run": "ci-7"}) == 200
    assert _chat(gateway, "/run/.bad/v1/chat/completions", key) == 404
    tasks = _tasks(api, budget)
    job1, job2, ci7 = (run_task_id(budget, key_id, run) for run in ("job-1", "job-2", "ci-7"))
    assert sorted(tasks) == sorted([job1, job2, ci7])
    assert job1.startswith(f"{budget}-run-job-1-") and job2.startswith(f"{budget}-run-job-2-")
    assert (tasks[job1]["admitted_requests"], tasks[job2]["admitted_requests"], tasks[ci7]["admitted_requests"]) \
        == (3, 1, 1)
    assert tasks[job1]["metadata"] == {"budget_key": key_id, "run": "job-1"}


def test_a_task_opened_before_runs_were_named_goes_on(gateway, second_gateway) -> None:
    """A run whose task has the unnamed id (<budget>-run-<16 hex>, as the gateway named
    it before) goes on with it, through every gateway, and no named task is opened; a
    task at that id that names another key in its metadata is not the run's."""
    api = _api(gateway)
    budget, key_id, key = _budget_key(api)
    unnamed = earlier_run_task_ids(budget, key_id, "job")[0]
    r = api.post("/admin/tasks", json={"id": unnamed, "budget": budget, "request_limit": 5,
                                       "metadata": {"budget_key": key_id, "run": "job"}})
    assert r.status_code == 201, r.text
    run = {"x-taskgate-run": "job"}
    assert [_chat(gw, "/v1/chat/completions", key, **run) for gw in (gateway, second_gateway)] == [200, 200]
    assert _chat(gateway, "/run/job/v1/chat/completions", key) == 200
    assert {t: v["admitted_requests"] for t, v in _tasks(api, budget).items()} == {unnamed: 3}

    other = earlier_run_task_ids(budget, key_id, "other")[0]
    assert api.post("/admin/tasks", json={"id": other, "budget": budget,
                                          "metadata": {"budget_key": "key_0000000000000000", "run": "other"}}
                    ).status_code == 201
    assert _chat(second_gateway, "/v1/chat/completions", key, **{"x-taskgate-run": "other"}) == 200
    tasks = _tasks(api, budget)
    assert tasks[other]["admitted_requests"] == 0
    assert tasks[run_task_id(budget, key_id, "other")]["admitted_requests"] == 1


# --- taskgate run --key ----------------------------------------------------------------


def _run(gateway: GatewayProcess, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "TASKGATE_"))}
    return subprocess.run([sys.executable, "-m", "app.cli", "run", *args], capture_output=True, text=True,
                          timeout=60, env={**base, "TASKGATE_URL": gateway.url, **env})


def _run_name(stderr: str) -> str:
    found = re.search(r"^taskgate: run (\S+) of a budget key", stderr, re.M)
    assert found, stderr
    return found.group(1)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_taskgate_run_with_a_key_opens_a_run_per_invocation(gateway, wire) -> None:
    """The issue's case: the same agent run twice through one key, no run header, the
    same first messages: two tasks, each named after its run."""
    api = _api(gateway)
    budget, key_id, key = _budget_key(api, request_limit=10)
    first = _run(gateway, "--key", key, "--", sys.executable, str(AGENT), wire, "2")
    second = _run(gateway, "--", sys.executable, str(AGENT), wire, "3", TASKGATE_BUDGET_KEY=key)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    names = [_run_name(p.stderr) for p in (first, second)]
    assert names[0] != names[1]
    for name in names:
        assert re.fullmatch(r"python[\w.]*-\d{8}T\d{6}Z-[0-9a-f]{4}", name), name
    tasks = _tasks(api, budget)
    assert sorted(tasks) == sorted(run_task_id(budget, key_id, name) for name in names)
    for name, turns in zip(names, (2, 3)):
        task = tasks[run_task_id(budget, key_id, name)]
        assert task["id"].startswith(f"{budget}-run-{name}-")
        assert (task["admitted_requests"], task["request_limit"], task["metadata"]["run"]) == (turns, 10, name)


def test_taskgate_run_with_a_key_continues_a_named_run_and_gives_the_agent_its_run(gateway) -> None:
    api = _api(gateway)
    budget, key_id, key = _budget_key(api, request_limit=3)
    ps = [_run(gateway, "--key", key, "--run", "nightly-7", "--", sys.executable, str(AGENT), "openai", "2")
          for _ in range(2)]
    assert [p.returncode for p in ps] == [0, 3]  # the agent's own status: 3, refused at the run's 4th request
    assert ps[1].stdout.splitlines() == ["turn 1: " + ps[1].stdout.splitlines()[0].split(": ", 1)[1],
                                         "turn 2: refused (400)"]
    task = _tasks(api, budget)[run_task_id(budget, key_id, "nightly-7")]
    assert (task["status"], task["stop_reason"], task["admitted_requests"]) == ("stopped", "request_limit", 3)
    assert len(_tasks(api, budget)) == 1

    show = "import os; print(os.environ['TASKGATE_RUN'], os.environ.get('TASKGATE_TASK_ID'), " \
           "os.environ['OPENAI_BASE_URL'], os.environ['ANTHROPIC_BASE_URL'], os.environ['OPENAI_API_KEY'] == " \
           "os.environ['ANTHROPIC_API_KEY'] == os.environ['TASKGATE_BUDGET_KEY'])"
    p = _run(gateway, "--run", "r1", "--", sys.executable, "-c", show, TASKGATE_BUDGET_KEY=key,
             TASKGATE_TASK_ID="stale")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["r1", "None", f"{gateway.url}/run/r1/v1", f"{gateway.url}/run/r1", "True"]


@pytest.mark.parametrize("args, says", [
    (["--key", "tgk-x", "--request-limit", "3"], "--request-limit: not with --key"),
    (["--key", "tgk-x", "--budget", "b", "--id", "i"], "--id, --budget: not with --key"),
    (["--run", "r1"], "--run names a run of a budget key"),
    (["--key", "tg-not-a-key"], "a budget key starts with tgk-"),
    (["--key", "tgk-x", "--run", "-bad"], "letters, digits"),
    (["--key", "tgk-x", "--run", "a/b"], "letters, digits"),
])
def test_taskgate_run_with_a_key_refuses_what_does_not_fit(gateway, args: list[str], says: str) -> None:
    p = _run(gateway, *args, "--", sys.executable, "-c", "print('started')")
    assert p.returncode == 2 and says in p.stderr and "started" not in p.stdout, p.stderr


def test_the_longest_run_task_id_through_admission_the_admin_api_and_the_tasks_list(gateway) -> None:
    """A 64-character budget and a run name past 40 characters: the run's task id is 126
    characters, admitted on, read back by id, and listed by `taskgate tasks list` piped
    (as scripts read it) one line a row under a one-line header."""
    api = _api(gateway)
    budget = "b" + secrets.token_hex(3) + "-" * 2 + "x" * 55  # 64 characters
    assert api.post("/admin/budgets", json={"id": budget}).status_code == 201
    r = api.post(f"/admin/budgets/{budget}/keys", json={"template": {}})
    key_id, key = r.json()["id"], r.json()["key"]
    run = "nightly build of the payments service, retry 2"
    assert _chat(gateway, "/v1/chat/completions", key, **{"x-taskgate-run": run}) == 200
    task_id = run_task_id(budget, key_id, run)
    assert len(task_id) == 126 and task_id.startswith(f"{budget}-run-nightly-build-of-the-payments-service-")
    assert api.get(f"/admin/tasks/{task_id}").json()["admitted_requests"] == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKGATE_")}
    env.update(TASKGATE_URL=gateway.url, TASKGATE_ADMIN_TOKEN=ADMIN_TOKEN)
    p = subprocess.run([sys.executable, "-m", "app.cli", "tasks", "list", "--budget", budget], capture_output=True,
                       text=True, timeout=60, env=env)
    lines = p.stdout.rstrip("\n").splitlines()
    assert len(lines) == 2, p.stdout
    assert lines[0].split() == ["id", "status", "requests", "refused", "tokens", "tool", "calls", "dollars",
                                "(spent/ceiling", "+reserved)", "stop", "reason"]
    assert lines[1].split()[:3] == [task_id, "active", "1"]
