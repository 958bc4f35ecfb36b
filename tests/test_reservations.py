"""Holds expire (issue 21, item 4): a dollar hold stranded by a gateway killed with
``kill -9`` is released by another gateway's sweep once past its request's deadline,
never earlier; the admin action releases one by hand. Real gateway processes, real
PostgreSQL."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from decimal import Decimal

from click.testing import CliRunner

from app.admission.reservations import Owner, owner_gone, releasable
from app.cli import main
from tests.holds import SWEEP_S, held, hold_then_kill, send_in_background, sweeper  # noqa: F401 - fixture
from tests.support import ADMIN_TOKEN, Admin, sql

UPSTREAM_TIMEOUT_S = 6.0


def test_a_hold_of_a_killed_gateway_is_released_after_its_deadline_never_before(
        database_url, upstream, sweeper):
    admin = Admin(sweeper.url)
    task_id, token = admin.create_task(cost_limit_usd=60)
    with hold_then_kill(database_url, upstream, task_id, token,
                        TASKGATE_UPSTREAM_TIMEOUT_S=str(UPSTREAM_TIMEOUT_S)) as (victim, hold):
        reserved = Decimal(str(admin.task(task_id)["reserved_usd"]))
        assert reserved == hold["amount_usd"] > 0
        assert hold["owner_pid"] == victim.proc.pid
        # the deadline is the request's longest run: upstream timeout + stream close grace
        span = (hold["deadline_at"] - hold["created_at"]).total_seconds()
        assert UPSTREAM_TIMEOUT_S <= span <= UPSTREAM_TIMEOUT_S + 10
    (now,) = sql(database_url, "SELECT now() AS now")
    assert now["now"] < hold["deadline_at"] - timedelta(seconds=2 * SWEEP_S), "the deadline passed too soon to tell"
    time.sleep(2 * SWEEP_S + 0.5)  # several sweeps of a gone owner before the deadline
    assert Decimal(str(admin.task(task_id)["reserved_usd"])) == reserved  # never earlier
    event = admin.wait_for_event(task_id, "reservation_released", timeout=span + 10)
    released_at = datetime.fromisoformat(event["created_at"])
    assert hold["deadline_at"] <= released_at <= hold["deadline_at"] + timedelta(seconds=SWEEP_S + 3)
    assert event["reason"] == "owner_gone" and Decimal(event["detail"]["released_usd"]) == reserved
    task = admin.task(task_id)
    assert Decimal(str(task["reserved_usd"])) == 0 and task["status"] == "active"
    assert Decimal(str(task["cost_usd"])) == 0  # released, not charged
    assert sql(database_url, "SELECT 1 FROM reservations WHERE task_id = $1", task_id) == []


def test_the_admin_action_releases_a_gone_gateways_hold_at_once(database_url, upstream, sweeper):
    admin = Admin(sweeper.url)
    task_id, token = admin.create_task(cost_limit_usd=60)
    with hold_then_kill(database_url, upstream, task_id, token) as (_, hold):
        pass
    result = CliRunner().invoke(main, ["tasks", "release", task_id, "--json"],
                                env={"TASKGATE_URL": sweeper.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    assert result.exit_code == 0, result.output
    done = json.loads(result.output)
    assert done["released"] == 1 and Decimal(done["released_usd"]) == hold["amount_usd"]
    assert Decimal(done["reserved_usd"]) == 0
    assert [e["reason"] for e in admin.events(task_id) if e["kind"] == "reservation_released"] == ["released_by_admin"]
    again = admin.http.post(f"/admin/tasks/{task_id}/release-reservations").json()
    assert again["released"] == 0  # nothing twice
    assert admin.http.post("/admin/tasks/no-such-task/release-reservations").status_code == 404


def test_a_settled_request_leaves_no_hold_and_a_live_owner_keeps_its_own(database_url, upstream, sweeper):
    admin = Admin(sweeper.url)
    task_id, token = admin.create_task(cost_limit_usd=60)
    upstream.script("delay", delay_s=2.0, input_tokens=10, output_tokens=10)
    thread = send_in_background(sweeper.url, token)
    held(database_url, task_id)
    assert admin.http.post(f"/admin/tasks/{task_id}/release-reservations").json()["released"] == 0
    thread.join(30)
    deadline = time.monotonic() + 10  # settlement follows the client's last byte
    while Decimal(str((task := admin.task(task_id))["reserved_usd"])) != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Decimal(str(task["reserved_usd"])) == 0 and Decimal(str(task["cost_usd"])) > 0
    assert sql(database_url, "SELECT 1 FROM reservations WHERE task_id = $1", task_id) == []


def test_releasable_needs_a_gone_owner_and_a_passed_deadline():
    alive = {10: 1000.0}
    rows = [{"id": 1, "owner_host": "h", "owner_pid": 10, "owner_started_at": 1000.0, "overdue": True},   # alive
            {"id": 2, "owner_host": "h", "owner_pid": 11, "owner_started_at": 1000.0, "overdue": True},   # gone
            {"id": 3, "owner_host": "h", "owner_pid": 11, "owner_started_at": 1000.0, "overdue": False},  # gone, early
            {"id": 4, "owner_host": "h", "owner_pid": 10, "owner_started_at": 900.0, "overdue": True},    # pid reused
            {"id": 5, "owner_host": "other", "owner_pid": 11, "owner_started_at": 1.0, "overdue": True}]  # elsewhere
    assert releasable(rows, "h", alive.get, by_hand=False) == [2, 4]
    assert releasable(rows, "h", alive.get, by_hand=True) == [1, 2, 3, 4, 5]
    assert not owner_gone(Owner("other", 11, 1.0), "h", alive.get)
