"""``/admin/budgets`` on a real gateway and PostgreSQL: create (nested, depth <= 4),
read with spend per window, list, change limits, delete when empty; tasks name a budget;
budget keys are shown once and revocable. Errors in the admin API's one shape."""

from __future__ import annotations

import secrets

import httpx
import pytest

from tests.support import ADMIN_TOKEN


@pytest.fixture
def api(gateway) -> httpx.Client:
    return httpx.Client(base_url=gateway.url, timeout=10, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})


def _id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    return error


def test_create_nested_budgets_and_read_them(api: httpx.Client) -> None:
    org, team = _id("org"), _id("team")
    r = api.post("/admin/budgets", json={"id": org, "cost_limit_usd": 500, "window": "month",
                                         "timezone": "Europe/Berlin", "metadata": {"owner": "ops"}})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["depth"], body["parent"], body["window"], body["timezone"]) == (1, None, "month", "Europe/Berlin")
    assert body["current"]["admitted_requests"] == 0 and body["current"]["resets_at"] is not None
    r = api.post("/admin/budgets", json={"id": team, "parent": org, "request_limit": 250})
    assert r.status_code == 201 and r.json()["depth"] == 2, r.text
    assert r.json()["current"]["resets_at"] is None  # lifetime window
    got = api.get(f"/admin/budgets/{org}").json()
    assert got["children"] == [team] and got["tasks"] == 0 and got["windows"] == []
    listed = api.get("/admin/budgets", params={"parent": org}).json()
    assert [b["id"] for b in listed["data"]] == [team]


def test_depth_is_at_most_four(api: httpx.Client) -> None:
    parent = None
    for depth in range(1, 5):
        budget = _id(f"d{depth}")
        r = api.post("/admin/budgets", json={"id": budget, "parent": parent})
        assert r.status_code == 201 and r.json()["depth"] == depth, r.text
        parent = budget
    error = _error(api.post("/admin/budgets", json={"parent": parent}), 409, "budget_too_deep")
    assert error["param"] == "parent"
    _error(api.post("/admin/budgets", json={"parent": "no-such-budget"}), 404, "budget_not_found")


def test_bad_bodies_are_refused_in_the_admin_shape(api: httpx.Client) -> None:
    budget = _id("dup")
    assert api.post("/admin/budgets", json={"id": budget}).status_code == 201
    _error(api.post("/admin/budgets", json={"id": budget}), 409, "budget_exists")
    assert _error(api.post("/admin/budgets", json={"timezone": "Mars/Olympus"}), 422,
                  "validation_error")["param"] == "timezone"
    _error(api.post("/admin/budgets", json={"window": "year"}), 422, "validation_error")
    _error(api.post("/admin/budgets", json={"request_limit": -1}), 422, "validation_error")
    _error(api.post("/admin/budgets", json={"id": "has/slash"}), 422, "validation_error")
    _error(api.get("/admin/budgets/no-such-budget"), 404, "budget_not_found")


def test_update_limits_and_delete_when_empty(api: httpx.Client) -> None:
    budget = _id("upd")
    api.post("/admin/budgets", json={"id": budget, "request_limit": 5})
    r = api.patch(f"/admin/budgets/{budget}", json={"request_limit": 10, "cost_limit_usd": 2.5})
    assert r.status_code == 200 and (r.json()["request_limit"], r.json()["cost_limit_usd"]) == (10, 2.5), r.text
    assert api.patch(f"/admin/budgets/{budget}", json={"request_limit": None}).json()["request_limit"] is None
    _error(api.patch(f"/admin/budgets/{budget}", json={"window": "day"}), 422, "validation_error")
    task = api.post("/admin/tasks", json={"budget": budget}).json()
    assert task["budget"] == budget
    assert [t["id"] for t in api.get("/admin/tasks", params={"budget": budget}).json()["data"]] == [task["id"]]
    assert api.get(f"/admin/budgets/{budget}").json()["tasks"] == 1
    _error(api.delete(f"/admin/budgets/{budget}"), 409, "budget_not_empty")
    assert api.delete(f"/admin/tasks/{task['id']}").status_code == 204
    assert api.delete(f"/admin/budgets/{budget}").status_code == 204
    _error(api.delete(f"/admin/budgets/{budget}"), 404, "budget_not_found")


def test_a_task_naming_an_unknown_budget_is_refused(api: httpx.Client) -> None:
    error = _error(api.post("/admin/tasks", json={"budget": "no-such-budget"}), 404, "budget_not_found")
    assert error["param"] == "budget"


def test_budget_keys_are_shown_once_and_revocable(api: httpx.Client) -> None:
    budget = _id("keys")
    api.post("/admin/budgets", json={"id": budget})
    r = api.post(f"/admin/budgets/{budget}/keys", json={"template": {"request_limit": 20,
                                                                     "loop_guard": {"identical_streak": 3}}})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["key"].startswith("tgk-") and created["template"]["request_limit"] == 20
    listed = api.get(f"/admin/budgets/{budget}/keys").json()["data"]
    assert [k["id"] for k in listed] == [created["id"]] and "key" not in listed[0]
    assert created["key"] not in api.get(f"/admin/budgets/{budget}/keys").text
    _error(api.post(f"/admin/budgets/{budget}/keys", json={"template": {"id": "x"}}), 422, "validation_error")
    assert api.delete(f"/admin/budgets/{budget}/keys/{created['id']}").status_code == 204
    assert api.get(f"/admin/budgets/{budget}/keys").json()["data"][0]["revoked_at"] is not None
    _error(api.delete(f"/admin/budgets/{budget}/keys/key_0000000000000000"), 404, "key_not_found")
    _error(api.post("/admin/budgets/no-such-budget/keys", json={}), 404, "budget_not_found")
