"""Admin API errors against a real gateway: hostile input gets one documented 4xx shape,
never a 5xx; a stop needs no body; a database bug is a 500 with a request id, not a
fake outage."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import httpx
import pytest

from app.db.pool import asyncpg_dsn

ERROR_KEYS = {"type", "code", "message", "param", "request_id"}


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert set(error) == ERROR_KEYS, error
    if code:
        assert error["code"] == code, error
    return error


# (method, path, raw JSON body or None): the reproductions and their relatives.
HOSTILE = [
    ("POST", "/admin/tasks", '{"request_limit": 9223372036854775808}'),
    ("POST", "/admin/tasks", '{"request_limit": 9223372036854775807}'),
    ("POST", "/admin/tasks", '{"max_stalls": 2147483648}'),
    ("POST", "/admin/tasks", '{"max_duration_s": 1e400}'),
    ("POST", "/admin/tasks", '{"max_duration_s": Infinity}'),
    ("POST", "/admin/tasks", '{"max_duration_s": NaN}'),
    ("POST", "/admin/tasks", '{"max_duration_s": 1e300}'),
    ("POST", "/admin/tasks", '{"stream_idle_timeout_s": 5.3e307}'),
    ("POST", "/admin/tasks", '{"metadata": {"a": "\\u0000"}}'),
    ("POST", "/admin/tasks", '{"metadata": {"\\u0000": 1}}'),
    ("POST", "/admin/tasks", '{"metadata": {"a": "\\ud800"}}'),
    ("POST", "/admin/tasks", '{"metadata": {"a": [1e400]}}'),
    ("POST", "/admin/tasks", '{"id": "a\\u0000b"}'),
    ("POST", "/admin/tasks", '{"request_limit": "10"}'),
    ("POST", "/admin/tasks", '{"request_limit": true}'),
    ("POST", "/admin/tasks", '{"loop_guard": {"per_tool_thresholds": {"check_status": 0}}}'),
    ("POST", "/admin/tasks", '{"loop_guard": {"per_tool_thresholds": {"check_status": -1}}}'),
    ("POST", "/admin/tasks", '{"loop_guard": {"cycle_repeats": 1}}'),
    ("POST", "/admin/tasks", '{"loop_guard": {"identical_streak": 99999999999}}'),
    ("POST", "/admin/tasks", '[' * 5000 + ']' * 5000),
    ("POST", "/admin/tasks", '{"id": '),
    ("PATCH", "/admin/tasks/{id}", '{"request_limit": null}'),
    ("PATCH", "/admin/tasks/{id}", '{"max_duration_s": 1e400}'),
    ("PATCH", "/admin/tasks/{id}", '{"token_limit": 18446744073709551616}'),
    ("PATCH", "/admin/tasks/{id}", '{"metadata": {"x": "\\u0000"}}'),
    ("POST", "/admin/tasks/{id}/stop", '{"reason": "a\\u0000"}'),
    ("POST", "/admin/tasks/{id}/stop", '{"message": "\\ud800"}'),
    ("POST", "/admin/tasks/{id}/resume", '{"reason": "\\u0000"}'),
    ("GET", "/admin/tasks/a%00b", None),
    ("DELETE", "/admin/tasks/a%00b", None),
    ("GET", "/admin/tasks/" + "x" * 300, None),
    ("GET", "/admin/tasks?after=%00", None),
    ("GET", "/admin/tasks?after=%ED%A0%80", None),
    ("GET", "/admin/tasks/{id}/events?after=1e20", None),
    ("GET", "/admin/tasks/{id}/events?after=100000000000000000000", None),
    ("GET", "/admin/tasks/{id}/events?after=-1", None),
    ("GET", "/admin/tasks/{id}/tool-calls?after=9223372036854775808", None),
    ("GET", "/admin/tasks/{id}/tool-calls?after=%00", None),
]


@pytest.mark.parametrize("method,path,body", HOSTILE, ids=lambda v: repr(v)[:40] if v else "-")
def test_hostile_admin_input_gets_a_4xx_in_the_error_shape(admin, method, path, body) -> None:
    task_id, _ = admin.create_task()
    before = admin.task(task_id)
    r = admin.http.request(method, path.replace("{id}", task_id), content=body,
                           headers={"content-type": "application/json"} if body is not None else {})
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert_error(r, r.status_code)
    after = admin.task(task_id)
    assert {k: v for k, v in after.items() if k != "updated_at"} == \
        {k: v for k, v in before.items() if k != "updated_at"}


def test_errors_name_the_field(admin) -> None:
    task_id, _ = admin.create_task()
    r = admin.http.patch(f"/admin/tasks/{task_id}", json={"request_limit": None})
    assert assert_error(r, 422, "validation_error")["param"] == "request_limit"
    r = admin.http.post("/admin/tasks", json={"loop_guard": {"per_tool_thresholds": {"poll": 0}}})
    assert assert_error(r, 422)["param"] == "loop_guard.per_tool_thresholds.poll"
    assert assert_error(admin.http.get("/admin/tasks/nope-404"), 404, "task_not_found")["param"] == "task_id"
    assert_error(admin.http.post("/admin/tasks", json={"id": task_id}), 409, "task_exists")
    assert_error(admin.http.post(f"/admin/tasks/{task_id}/resume", json={"reason": "x"}), 409, "task_not_stopped")
    assert_error(httpx.get(admin.http.base_url.join("/admin/tasks")), 401, "unauthorized")
    assert_error(admin.http.post("/admin/tasks", content=b"{", headers={"content-type": "application/json"}),
                 400, "invalid_json")
    r = admin.http.put("/admin/tasks")
    assert_error(r, 405)
    assert set(r.headers["allow"].split(", ")) == {"GET", "POST"}


def test_stop_needs_no_body(admin) -> None:
    task_id, _ = admin.create_task()
    r = admin.http.post(f"/admin/tasks/{task_id}/stop")
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["stop_reason"]) == ("stopped", "manual")
    task_id, _ = admin.create_task()
    r = admin.http.post(f"/admin/tasks/{task_id}/stop", json={"message": "by hand"})
    assert r.status_code == 200 and r.json()["stop_detail"]["message"] == "by hand"


def test_openapi_documents_every_error(admin) -> None:
    spec = admin.http.get("/openapi.json").json()
    paths = spec["paths"]
    expected = {
        ("/admin/tasks", "post"): {"201", "400", "401", "409", "422"},
        ("/admin/tasks", "get"): {"200", "401", "422"},
        ("/admin/tasks/{task_id}", "get"): {"200", "401", "404", "422"},
        ("/admin/tasks/{task_id}", "patch"): {"200", "400", "401", "404", "422"},
        ("/admin/tasks/{task_id}", "delete"): {"204", "401", "404", "422"},
        ("/admin/tasks/{task_id}/stop", "post"): {"200", "400", "401", "404", "422"},
        ("/admin/tasks/{task_id}/resume", "post"): {"200", "400", "401", "404", "409", "422"},
        ("/admin/tasks/{task_id}/events", "get"): {"200", "401", "404", "422"},
        ("/admin/tasks/{task_id}/tool-calls", "get"): {"200", "401", "404", "422"},
    }
    for (path, method), statuses in expected.items():
        documented = paths[path][method]["responses"]
        assert statuses <= set(documented), (path, method, sorted(documented))
        for status in set(documented) - {"200", "201", "204"}:
            ref = documented[status]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorBody"), (path, method, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert paths["/admin/tasks/{task_id}/stop"]["post"]["requestBody"].get("required") is not True


# --- a database error that is not an outage is a 500 with a request id -------------------

_TRIGGER = """
CREATE OR REPLACE FUNCTION taskgate_test_boom() RETURNS trigger AS $$
BEGIN
  IF NEW.metadata ? 'boom' THEN RAISE EXCEPTION 'boom from a test trigger'; END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS taskgate_test_boom ON tasks;
CREATE TRIGGER taskgate_test_boom BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION taskgate_test_boom();
"""
_UNTRIGGER = "DROP TRIGGER IF EXISTS taskgate_test_boom ON tasks; DROP FUNCTION IF EXISTS taskgate_test_boom();"


def _sql(database_url: str, sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(database_url))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()
    asyncio.run(run())


@pytest.fixture
def failing_updates(database_url: str):
    """Every UPDATE of a task whose metadata has "boom" fails inside PostgreSQL."""
    _sql(database_url, _TRIGGER)
    try:
        yield
    finally:
        _sql(database_url, _UNTRIGGER)


def test_database_bug_is_500_with_request_id_not_503(gateway, admin, failing_updates) -> None:
    task_id, token = admin.create_task(metadata={"boom": True})
    r = admin.http.patch(f"/admin/tasks/{task_id}", json={"request_limit": 5},
                         headers={"x-request-id": "test-rid-admin-1"})
    error = assert_error(r, 500, "internal_error")
    assert error["request_id"] == "test-rid-admin-1" == r.headers["x-request-id"]
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}, timeout=10)
    assert r.status_code == 500, r.text
    assert r.json()["error"]["code"] == "internal_error"
    rid = r.headers["x-request-id"]
    assert rid.startswith("req_") and rid in r.json()["error"]["message"]
    assert admin.task(task_id)["admitted_requests"] == 0  # rolled back: nothing counted
    log = gateway.output()
    assert "request id test-rid-admin-1" in log and f"request id {rid}" in log
    assert "boom from a test trigger" in log and "Traceback" in log


# --- the proxy never fails a request over a tool call id or name --------------------------

def _turn(call_id: str, name: str) -> dict:
    return {"model": "mock-model", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "done"}]}


@pytest.mark.parametrize("call_id,name", [
    ("call\x00nul", "read_file"), ("call_\ud800", "read_file"), ("c" * 1_000_000, "read_file"),
    ("call_ok_1", "read\x00file"), ("call_ok_2", "\udfff"), ("call_ok_3", "n" * 1_000_000),
], ids=["nul-id", "surrogate-id", "1MB-id", "nul-name", "surrogate-name", "1MB-name"])
def test_hostile_tool_call_ids_and_names_are_hashed_not_failed(gateway, admin, call_id, name) -> None:
    task_id, token = admin.create_task()
    body = json.dumps(_turn(call_id, name))  # ensure_ascii: NUL and surrogates as \u escapes
    r = httpx.post(gateway.url + "/v1/chat/completions", content=body, timeout=30,
                   headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
    assert r.status_code == 200, r.text
    r = admin.http.get(f"/admin/tasks/{task_id}/tool-calls")
    assert r.status_code == 200, r.text
    (row,) = r.json()["data"]
    hashed = [v for v in (row["call_id"], row["tool_name"]) if v.startswith("sha256:")]
    assert len(hashed) == 1 and row["result_hash"] is not None  # the result found its call
    assert admin.task(task_id)["admitted_requests"] == 1
