"""``taskgate budgets ...``, ``tasks create/list --budget`` and ``taskgate run --budget``
against a real gateway process (click's runner; ``run`` as a subprocess)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest
from click.testing import CliRunner

from app.cli import main
from tests.support import ADMIN_TOKEN


@pytest.fixture()
def cli(gateway):
    runner = CliRunner()
    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}

    def invoke(*args: str):
        return runner.invoke(main, list(args), env=env, catch_exceptions=False)
    return invoke


def test_budgets_create_show_list_update_keys_delete(cli) -> None:
    team = "cli-team-" + secrets.token_hex(3)
    r = cli("budgets", "create", "--id", team, "--window", "month", "--cost-limit", "500", "--request-limit", "250")
    assert r.exit_code == 0, r.output
    assert team in r.output and "month window (UTC)" in r.output and "$0.00 / $500.00" in r.output
    project = json.loads(cli("budgets", "create", "--parent", team, "--token-limit", "1000", "--json").output)
    assert (project["parent"], project["depth"]) == (team, 2)
    r = cli("budgets", "list")
    assert r.exit_code == 0 and "lifetime" in r.output and "$500.00" in r.output, r.output
    listed = {b["id"]: b for b in json.loads(cli("budgets", "list", "--json").output)}
    assert listed[team]["request_limit"] == 250 and listed[project["id"]]["parent"] == team
    r = cli("budgets", "update", team, "--request-limit", "none", "--json")
    assert json.loads(r.output)["request_limit"] is None
    assert "nested" in cli("budgets", "show", team).output
    r = cli("tasks", "create", "--budget", project["id"], "--json")
    task = json.loads(r.output)
    assert task["budget"] == project["id"]
    listed = json.loads(cli("tasks", "list", "--budget", project["id"], "--json").output)
    assert [t["id"] for t in listed] == [task["id"]]
    r = cli("budgets", "key-create", team, "--request-limit", "30")
    assert r.exit_code == 0 and "key: tgk-" in r.output and "OPENAI_API_KEY=tgk-" in r.output, r.output
    key_id = json.loads(cli("budgets", "keys", team, "--json").output)[0]["id"]
    assert "request_limit=30" in cli("budgets", "keys", team).output
    assert cli("budgets", "key-revoke", team, key_id).exit_code == 0
    r = cli("budgets", "delete", team)
    assert r.exit_code == 1 and "HTTP 409" in r.output  # still has a nested budget
    cli("tasks", "delete", task["id"], "--yes")
    assert cli("budgets", "delete", project["id"]).exit_code == 0
    assert cli("budgets", "delete", team).exit_code == 0


def test_run_under_a_budget(gateway, admin, cli) -> None:
    budget = "cli-run-" + secrets.token_hex(3)
    cli("budgets", "create", "--id", budget)
    env = {**os.environ, "TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "run", "--budget", budget, "--",
                           sys.executable, "-c", "import os; print(os.environ['TASKGATE_TASK_ID'])"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    task_id = proc.stdout.strip().splitlines()[-1]
    assert admin.task(task_id)["budget"] == budget
