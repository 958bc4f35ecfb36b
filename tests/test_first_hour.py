"""Small inconsistencies a new user meets in the first hour (issue 40, item 5), each
against a real gateway process or the real command:

- the stop sentence names the limit at the time of the stop once it was changed since
  (the counters beside it are against today's limit);
- ``taskgate tasks events`` numbers its rows 1, 2, … as the dashboard does;
- ``taskgate serve`` warns about a misspelled setting before anything else;
- ``--help`` points at ``taskgate docs``, whose pages ship with the package;
- ``taskgate budgets list`` prints one line a row when piped, as ``tasks list`` does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main
from tests.support import ADMIN_TOKEN, GatewayProcess

ROOT = Path(__file__).resolve().parent.parent


def _cli(gateway, *args: str):
    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _ask(gateway, token: str) -> int:
    return httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
                      timeout=30).status_code


def test_the_stop_sentence_names_the_limit_it_stopped_at(gateway, admin) -> None:
    task, token = admin.create_task(id=f"fh-limit-{os.getpid()}", request_limit=3)
    assert [_ask(gateway, token) for _ in range(4)] == [200, 200, 200, 400]
    before = admin.task(task)["stop_message"]
    assert "it used all 3 requests of its request_limit)" in before and "3 of 3 requests admitted" in before
    assert _cli(gateway, "tasks", "update", task, "--request-limit", "10").exit_code == 0
    after = admin.task(task)["stop_message"]
    assert "it used all 3 requests of its request_limit (3 when it stopped; 10 now))" in after, after
    assert "3 of 10 requests admitted" in after
    shown = _cli(gateway, "tasks", "show", task).output  # the operator reads what the agent reads
    assert "(3 when it stopped; 10 now)" in " ".join(shown.split())


def test_events_are_numbered_from_one_as_on_the_dashboard(gateway, admin) -> None:
    admin.create_task(id=f"fh-events-before-{os.getpid()}")  # event ids are global: not 1, 2, 3 below
    task, _ = admin.create_task(id=f"fh-events-{os.getpid()}")
    _cli(gateway, "tasks", "stop", task)
    _cli(gateway, "tasks", "resume", task, "--reason", "checked")
    ids = [e["id"] for e in json.loads(_cli(gateway, "tasks", "events", task, "--json").output)]
    assert len(ids) == 3 and ids != [1, 2, 3]
    table = _cli(gateway, "tasks", "events", task).output
    numbers = re.findall(r"^\s*(\d+)\s+\d{4}-\d\d-\d\d ", table, re.M)  # each row's first cell
    assert numbers == ["1", "2", "3"], table


def test_a_misspelled_setting_is_warned_about_first(database_url, upstream) -> None:
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_STREAM_IDLE_TIMOUT_S="5") as gw:
        lines = [line for line in gw.output().splitlines() if line.startswith("taskgate: ")]
    assert lines[0] == ("taskgate: warning: TASKGATE_STREAM_IDLE_TIMOUT_S is not a setting and is ignored "
                        "(did you mean TASKGATE_STREAM_IDLE_TIMEOUT_S?)"), lines
    assert sum("is not a setting" in line for line in lines) == 1  # once


def test_help_points_at_taskgate_docs_which_ship_with_the_package() -> None:
    help_text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    assert "taskgate docs" in help_text and "README.md and docs/" not in help_text
    listing = subprocess.run([sys.executable, "-m", "app.cli", "docs"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "cli " in listing.stdout and "Command line" in listing.stdout and "readme " in listing.stdout
    page = subprocess.run([sys.executable, "-m", "app.cli", "docs", "cli"], capture_output=True, text=True,
                          timeout=60)
    assert page.returncode == 0 and "Command line" in page.stdout and "taskgate tasks" in page.stdout
    wrong = subprocess.run([sys.executable, "-m", "app.cli", "docs", "nope"], capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode == 1 and "taskgate docs lists them" in wrong.stderr
    # in a wheel: app/docs holds the pages (in the checkout, a link to docs/)
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "docs/*.md" in package_data["app"]
    assert (ROOT / "app" / "docs").resolve() == ROOT / "docs"


def test_budgets_list_is_one_line_a_row_when_piped(gateway) -> None:
    budget = f"fh-a-budget-with-a-long-name-{os.getpid()}"
    made = _cli(gateway, "budgets", "create", "--id", budget, "--window", "month", "--request-limit", "100000",
                "--token-limit", "50000000", "--cost-limit", "12345.67")
    assert made.exit_code == 0, made.output
    listed = _cli(gateway, "budgets", "list").output.splitlines()
    row = next(line for line in listed if budget in line)
    assert "0 / 100000" in row and "0 / 50000000" in row and "$12345.67" in row and "month" in row, listed


def test_each_limit_stop_says_its_limit_then_and_now() -> None:
    """Dollars, time and stalls as requests above; an unchanged limit adds nothing."""
    from decimal import Decimal

    from app.admission.refusals import stop_message
    from tests.task_values import task_value

    def message(reason: str, detail: dict, **now: object) -> str:
        return stop_message(task_value(status="stopped", stop_reason=reason, stop_detail=detail, **now)) or ""

    cost = {"cost_usd": "4.9", "reserved_usd": "0", "request_reservation_usd": "0.2", "cost_limit_usd": "5"}
    assert "($5.00 when it stopped; $8.00 now)" in message("cost_limit", cost, cost_limit_usd=Decimal(8))
    assert "($5.00 when it stopped; none now)" in message("cost_limit", cost)
    assert "when it stopped" not in message("cost_limit", cost, cost_limit_usd=Decimal("5.00"))
    duration = {"elapsed_s": 61.0, "max_duration_s": 60}
    assert "(60 when it stopped; 120 now)" in message("max_duration", duration, max_duration_s=120.0)
    assert "when it stopped" not in message("max_duration", duration, max_duration_s=60.0)
    assert "(2 when it stopped; 5 now)" in message("repeated_stalls", {"stalls": 2, "max_stalls": 2}, max_stalls=5)


def test_tasks_show_says_how_many_strikes_a_task_drew(capsys: pytest.CaptureFixture[str]) -> None:
    """``taskgate tasks show``: a task with strikes says so; one without says nothing of them."""
    from app.cli import render

    task = {"id": "t-1", "status": "active", "admitted_requests": 3, "request_limit": 10, "token_limit": None,
            "input_tokens": 1, "output_tokens": 2, "total_tokens": 3, "tool_calls": 0, "tool_call_limit": None,
            "stalls": 0, "max_stalls": None, "max_duration_s": None, "strikes": 1}
    render.show_task(task)
    assert "strikes" in capsys.readouterr().out
    render.show_task({**task, "strikes": 0})
    assert "strikes" not in capsys.readouterr().out
