"""``taskgate tasks ...`` and ``taskgate run`` against a real gateway process.

The ``tasks`` commands run in-process through click's runner (they only speak HTTP);
``taskgate run`` runs as a real subprocess that starts a small agent script
(``tests/fixtures/agents/until_refused.py``) using the official SDKs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from tests.support import ADMIN_TOKEN

AGENT = Path(__file__).parent / "fixtures" / "agents" / "until_refused.py"


@pytest.fixture()
def cli(gateway):
    runner = CliRunner()
    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(main, list(args), env=env, input=input, catch_exceptions=False)
    return invoke


def test_create_prints_token_and_exports_then_show_list_update(cli, gateway, admin):
    r = cli("tasks", "create", "--id", "cli-create-1", "--request-limit", "7", "--token-limit", "900")
    assert r.exit_code == 0, r.output
    assert "token: tg" in r.output
    assert f"export OPENAI_BASE_URL={gateway.url}/v1 OPENAI_API_KEY=tg" in r.output
    assert f"export ANTHROPIC_BASE_URL={gateway.url} ANTHROPIC_API_KEY=tg" in r.output
    shown = json.loads(cli("tasks", "show", "cli-create-1", "--json").output)
    assert (shown["request_limit"], shown["token_limit"]) == (7, 900)
    r = cli("tasks", "update", "cli-create-1", "--request-limit", "9", "--token-limit", "none", "--json")
    assert r.exit_code == 0, r.output
    assert (json.loads(r.output)["request_limit"], json.loads(r.output)["token_limit"]) == (9, None)
    r = cli("tasks", "list", "--status", "active")
    assert "cli-create-1" in r.output and "0 / 9" in r.output


def test_stop_resume_events_tool_calls_delete(cli, admin):
    task_id, _ = admin.create_task(id="cli-stop-1")
    r = cli("tasks", "stop", task_id, "--message", "enough for today")
    assert r.exit_code == 0 and "stopped" in r.output
    assert json.loads(cli("tasks", "list", "--status", "stopped", "--json").output)[0]["status"] == "stopped"
    r = cli("tasks", "resume", task_id)
    assert r.exit_code == 2 and "--reason" in r.output  # the reason is required
    r = cli("tasks", "resume", task_id, "--reason", "reviewed")
    assert r.exit_code == 0 and "active" in r.output
    kinds = [e["kind"] for e in json.loads(cli("tasks", "events", task_id, "--json").output)]
    assert kinds == ["created", "stopped", "resumed"]
    assert "resumed" in cli("tasks", "events", task_id).output
    ledger = json.loads(cli("tasks", "tool-calls", task_id, "--json").output)
    assert ledger["data"] == [] and ledger["conversations"] == []
    r = cli("tasks", "delete", task_id, input="n\n")
    assert r.exit_code == 1  # declined
    assert cli("tasks", "delete", task_id, "--yes").exit_code == 0
    r = cli("tasks", "show", task_id)
    assert r.exit_code == 1
    assert r.output.strip() == f"Error: HTTP 404: No task with id '{task_id}'."


def test_errors_are_one_line(cli, gateway):
    runner = CliRunner()
    r = runner.invoke(main, ["tasks", "list"], env={"TASKGATE_URL": gateway.url,
                                                   "TASKGATE_ADMIN_TOKEN": "wrong"})
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert r.output.startswith("Error: HTTP 401: Missing or wrong admin token")
    r = runner.invoke(main, ["tasks", "list", "--url", "http://127.0.0.1:9"],
                      env={"TASKGATE_ADMIN_TOKEN": "x"})
    assert r.exit_code == 1 and r.output.startswith("Error: cannot reach taskgate at http://127.0.0.1:9")
    r = cli("tasks", "create", "--request-limit", "-3")
    assert r.exit_code == 1 and "request_limit" in r.output and len(r.output.strip().splitlines()) == 1


def _run(gateway, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "app.cli", "run", *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_run_agent_until_stopped(gateway, admin, wire):
    task_id = f"cli-run-{wire}"
    p = _run(gateway, "--id", task_id, "--request-limit", "3", "--", sys.executable, str(AGENT), wire)
    assert p.returncode == 4, p.stderr  # stopped: 4, whatever the agent's own status (3 here)
    assert p.stdout.splitlines()[:3] == [f"turn {i}: " + p.stdout.splitlines()[i - 1].split(": ", 1)[1]
                                         for i in (1, 2, 3)]
    status = 409 if wire == "anthropic" else 400  # a stopped task on /v1/messages is a 409
    assert p.stdout.splitlines()[3] == f"turn 4: refused ({status})"
    assert f"taskgate: task {task_id} stopped (request_limit); requests 3/3" in p.stderr
    assert f"taskgate: Task '{task_id}' is stopped (request_limit: it used all 3 requests" in p.stderr
    task = admin.task(task_id)
    assert task["status"] == "stopped" and task["admitted_requests"] == 3


def test_run_exit_status_and_active_outcome(gateway, admin):
    p = _run(gateway, "--request-limit", "10", "--", sys.executable, str(AGENT), "openai", "2")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "done"
    assert "active; requests 2/10" in p.stderr
    p = _run(gateway, "--", sys.executable, "-c", "import sys; sys.exit(7)")
    assert p.returncode == 7
    p = _run(gateway, "--", "/nonexistent/agent")
    assert p.returncode == 127 and "cannot start /nonexistent/agent" in p.stderr


def test_run_exits_4_when_the_task_was_stopped_though_the_agent_exits_0(gateway, admin):
    """An agent that swallows the refusal and exits 0 (as Aider does after an API error)."""
    swallow = ("import subprocess, sys; subprocess.run([sys.executable, %r, 'openai'])" % str(AGENT))
    p = _run(gateway, "--request-limit", "2", "--", sys.executable, "-c", swallow)
    assert "stopped (request_limit)" in p.stderr
    assert p.returncode == 4, p.stderr
