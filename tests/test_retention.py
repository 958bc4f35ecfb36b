"""Retention (issue 21, item 8): finished tasks older than the retention period are
deleted with their events, ledger and conversations, and nothing else is."""

from __future__ import annotations

import json
import time

import httpx
from click.testing import CliRunner

from app.cli import main
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess, sql


def _age(database_url: str, task_id: str, days: float) -> None:
    sql(database_url, "UPDATE tasks SET updated_at = now() - $2 * interval '1 day' WHERE id = $1", task_id, days)


def _rows(database_url: str, task_id: str) -> dict[str, int]:
    return {table: sql(database_url, f"SELECT count(*) AS n FROM {table} WHERE task_id = $1", task_id)[0]["n"]
            for table in ("task_events", "tool_calls", "conversations")}


def _with_history(gateway, admin: Admin, upstream, **limits) -> str:
    """A task with events, ledger rows and a conversation (one tool turn)."""
    task_id, token = admin.create_task(**limits)
    upstream.script("tool_call", name="read_file", arguments={"path": "a"})
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "go"}]}
    h = {"authorization": f"Bearer {token}"}
    first = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=h).json()
    call = first["choices"][0]["message"]["tool_calls"][0]
    body["messages"] += [first["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": "x"}]
    httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=h)
    return task_id


def test_prune_deletes_old_finished_tasks_with_their_history_and_nothing_else(gateway, admin, upstream,
                                                                               database_url):
    old_stopped = _with_history(gateway, admin, upstream)
    admin.http.post(f"/admin/tasks/{old_stopped}/stop", json={"reason": "manual"})
    old_idle = _with_history(gateway, admin, upstream)
    recent_stopped = _with_history(gateway, admin, upstream)
    admin.http.post(f"/admin/tasks/{recent_stopped}/stop", json={"reason": "manual"})
    recent = _with_history(gateway, admin, upstream)
    for task_id in (old_stopped, old_idle):
        assert _rows(database_url, task_id)["tool_calls"] >= 1
        _age(database_url, task_id, 31)
    _age(database_url, recent_stopped, 29)
    kept = {t: _rows(database_url, t) for t in (recent_stopped, recent)}
    result = CliRunner().invoke(main, ["tasks", "prune", "--older-than-days", "30", "--json"],
                                env={"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["deleted"] >= 2
    for task_id in (old_stopped, old_idle):
        assert admin.http.get(f"/admin/tasks/{task_id}").status_code == 404
        assert _rows(database_url, task_id) == {"task_events": 0, "tool_calls": 0, "conversations": 0}
    for task_id, rows in kept.items():
        assert admin.http.get(f"/admin/tasks/{task_id}").status_code == 200
        assert _rows(database_url, task_id) == rows
    assert admin.http.post("/admin/prune", params={"older_than_days": 0}).status_code == 422


def test_the_background_job_prunes_when_retention_is_set(database_url, upstream, gateway, admin):
    old = _with_history(gateway, admin, upstream)
    young = _with_history(gateway, admin, upstream)
    _age(database_url, old, 8)
    _age(database_url, young, 6)
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_RETENTION_DAYS="7"):
        deadline = time.monotonic() + 20
        while admin.http.get(f"/admin/tasks/{old}").status_code != 404 and time.monotonic() < deadline:
            time.sleep(0.2)
    assert admin.http.get(f"/admin/tasks/{old}").status_code == 404
    assert admin.http.get(f"/admin/tasks/{young}").status_code == 200
