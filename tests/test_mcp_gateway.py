"""The MCP gateway end to end: the official ``mcp`` SDK as the client, a real MCP server
written with the SDK (:mod:`tests.mcp_fixture`), a real gateway on PostgreSQL.

An agent's tool calls through ``/mcp/<name>`` are admitted, counted and loop-guarded on
the same task and latch as its model calls."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import httpx
import httpx2
import openai
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.mcp_fixture import McpFixture
from tests.mcp_stdio_bridge import StdioBridge
from tests.support import Admin, GatewayProcess, free_port

MODES = ("legacy", "2026-07-28")  # the initialize handshake (2025-11-25), and the stateless revision
_CONFIG = """
providers:
  main:
    kind: openai
    base_url: {upstream}/v1
models:
  - name: "*"
    provider: main
mcp_servers:
  - name: fixture
    url: {mcp}
    headers: {{x-server-secret: "${{FIXTURE_SECRET}}"}}
    tools:
      slow: {{timeout_s: 1}}
      count: {{price_usd: 0.25}}
  - name: down
    url: http://127.0.0.1:{down}/mcp
  - name: time
    url: {time}
"""


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpFixture]:
    with McpFixture() as server:
        yield server


@pytest.fixture(scope="module")
def time_server() -> Iterator[StdioBridge]:
    """``mcp-server-time`` (PyPI), a published stdio server, behind streamable HTTP."""
    # installed beside this interpreter (its venv may not be on PATH), else on PATH
    server = (shutil.which("mcp-server-time", path=os.path.dirname(sys.executable))
              or shutil.which("mcp-server-time") or "mcp-server-time")
    with StdioBridge(server, "--local-timezone", "UTC") as bridge:
        yield bridge


@pytest.fixture(scope="module")
def mcp_gateway(database_url: str, upstream, mcp_server: McpFixture, time_server: StdioBridge,
                tmp_path_factory) -> Iterator[GatewayProcess]:
    config = Path(tmp_path_factory.mktemp("mcp")) / "taskgate.yaml"
    config.write_text(_CONFIG.format(upstream=upstream.base_url, mcp=mcp_server.url, down=free_port(),
                                     time=time_server.url))
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_CONFIG=str(config),
                        FIXTURE_SECRET="server-only", TASKGATE_MCP_MAX_ANSWER_BYTES="2000000") as gw:
        yield gw


@pytest.fixture(scope="module")
def mcp_admin(mcp_gateway: GatewayProcess) -> Admin:
    return Admin(mcp_gateway.url)


def _client(gateway: GatewayProcess, token: str, mode: str, server: str = "fixture") -> Client:
    """The SDK's client on ``/mcp/<server>`` with the task token as its bearer token (its
    HTTP client is the SDK's own, ``httpx2``)."""
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(f"{gateway.url}/mcp/{server}", http_client=http), mode=mode)


def _calls(gateway: GatewayProcess, token: str, mode: str, tool: str, arguments: dict, times: int) -> list:
    """Call ``tool`` ``times`` times in one session; each item is the result or the MCPError."""

    async def run() -> list:
        out: list = []
        async with _client(gateway, token, mode) as client:
            for _ in range(times):
                try:
                    out.append(await client.call_tool(tool, arguments))
                except MCPError as exc:
                    out.append(exc)
        return out

    return asyncio.run(run())


def _raw(gateway: GatewayProcess, token: str | None, body: object, server: str = "fixture",
         headers: dict | None = None) -> httpx.Response:
    sent = {"accept": "application/json, text/event-stream", "content-type": "application/json",
            "mcp-protocol-version": "2026-07-28"}
    if isinstance(body, dict) and isinstance(body.get("method"), str):  # what 2026-07-28 clients send
        sent["mcp-method"] = body["method"]
        if isinstance(body.get("params", {}).get("name"), str):
            sent["mcp-name"] = body["params"]["name"]
    sent.update(headers or {})
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{gateway.url}/mcp/{server}", content=content, headers=sent, timeout=30)


#: What revision 2026-07-28 requires in every request's params (no initialize handshake).
META = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}


def _tools_call(tool: str, arguments: dict, call_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, **META}}


@pytest.mark.parametrize("mode", MODES)
def test_the_sdk_reaches_the_server_through_the_gateway(mcp_gateway, mcp_admin, mode):
    task_id, token = mcp_admin.create_task()

    async def run() -> tuple[list[str], object]:
        async with _client(mcp_gateway, token, mode) as client:
            tools = await client.list_tools()
            return [t.name for t in tools.tools], await client.call_tool("count", {})

    names, result = asyncio.run(run())
    assert {"grep", "count", "fail", "slow", "big"} <= set(names)
    assert result.content[0].text.startswith("call ")
    task = mcp_admin.task(task_id)
    assert task["tool_calls"] == 1 and task["admitted_requests"] == 0  # a tool call, not a model request


def test_answers_are_the_servers_bytes(mcp_gateway, mcp_admin, mcp_server):
    _, token = mcp_admin.create_task()
    for body in ({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": META},
                 _tools_call("grep", {"pattern": "TODO"}, 8)):
        headers = {"mcp-method": body["method"]}
        if body["method"] == "tools/call":
            headers["mcp-name"] = "grep"
        via = _raw(mcp_gateway, token, body, headers=headers)
        direct = httpx.post(mcp_server.url, json=body, timeout=30, headers={
            "accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", **headers})
        assert via.status_code == direct.status_code == 200
        assert via.content == direct.content
        assert via.headers["content-type"] == direct.headers["content-type"]


@pytest.mark.parametrize("mode", MODES)
def test_a_looping_tool_call_is_stopped_before_its_sixth_call_reaches_the_server(
        mcp_gateway, mcp_admin, mcp_server, upstream, mode):
    task_id, token = mcp_admin.create_task()
    before = mcp_server.calls().get("grep", 0)
    results = _calls(mcp_gateway, token, mode, "grep", {"pattern": "needle"}, 5)
    assert all(not isinstance(r, MCPError) for r in results), results
    task = mcp_admin.task(task_id)  # latched with the 5th result, before it was released
    assert task["status"] == "stopped" and task["stop_reason"] == "repeated_tool_call"
    assert task["stop_detail"]["tool_name"] == "grep" and task["tool_calls"] == 5
    assert task["stop_detail"]["mcp_server"] == "fixture"
    model = openai.OpenAI(base_url=mcp_gateway.url + "/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="repeated_tool_call"):  # one latch: model calls too
        model.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    refused = _calls(mcp_gateway, token, mode, "grep", {"pattern": "needle"}, 2)
    assert all(isinstance(r, MCPError) for r in refused), refused
    assert refused[0].error.code == -32001
    assert f"Task '{task_id}' is stopped (repeated_tool_call" in refused[0].error.message
    assert refused[0].error.data == {"type": "task_stopped", "code": "repeated_tool_call"}
    assert mcp_server.calls()["grep"] - before == 5  # the 6th and 7th never reached the server


def test_a_model_stop_refuses_tool_calls(mcp_gateway, mcp_admin, mcp_server):
    task_id, token = mcp_admin.create_task(request_limit=1)
    model = openai.OpenAI(base_url=mcp_gateway.url + "/v1", api_key=token, max_retries=0)
    model.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError):
        model.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    answer = _raw(mcp_gateway, token, _tools_call("count", {}))
    assert answer.json()["error"]["data"] == {"type": "task_stopped", "code": "request_limit"}


def test_changing_results_are_not_a_loop(mcp_gateway, mcp_admin):
    task_id, token = mcp_admin.create_task()
    results = _calls(mcp_gateway, token, "2026-07-28", "count", {}, 12)
    assert not any(isinstance(r, MCPError) for r in results)
    assert mcp_admin.task(task_id)["status"] == "active"


def test_a_failure_streak_is_stopped(mcp_gateway, mcp_admin, mcp_server):
    task_id, token = mcp_admin.create_task(loop_guard={"failure_streak": 3, "identical_streak": 50})
    results = _calls(mcp_gateway, token, "2026-07-28", "fail", {"path": "/etc/shadow"}, 5)
    assert [isinstance(r, MCPError) for r in results] == [False, False, False, True, True]
    assert results[0].is_error  # the tool's own failure reaches the agent as is
    assert mcp_admin.task(task_id)["stop_reason"] == "repeated_tool_failure"


def test_an_operators_stop_refuses_tool_calls_at_once(mcp_gateway, mcp_admin, mcp_server):
    task_id, token = mcp_admin.create_task()
    assert mcp_admin.http.post(f"/admin/tasks/{task_id}/stop", json={}).status_code == 200
    before = mcp_server.calls().get("count", 0)
    answer = _raw(mcp_gateway, token, _tools_call("count", {}))
    assert answer.status_code == 200 and answer.json()["error"]["data"]["type"] == "task_stopped"
    assert mcp_server.calls().get("count", 0) == before
    assert mcp_admin.task(task_id)["refused_requests"] == 1


def test_tool_call_limit_holds_under_concurrency(mcp_gateway, mcp_admin, mcp_server):
    task_id, token = mcp_admin.create_task(tool_call_limit=3)
    before = mcp_server.calls().get("count", 0)
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: _raw(mcp_gateway, token, _tools_call("count", {}, i)), range(6)))
    results = [a.json() for a in answers]
    assert sum("result" in r for r in results) == 3
    assert sum(r.get("error", {}).get("data", {}).get("code") == "tool_call_limit" for r in results) == 3
    assert mcp_server.calls()["count"] - before == 3
    task = mcp_admin.task(task_id)
    assert task["tool_calls"] == 3 and task["stop_reason"] == "tool_call_limit"


def test_a_tools_price_counts_toward_the_dollar_ceiling(mcp_gateway, mcp_admin, mcp_server):
    task_id, token = mcp_admin.create_task(cost_limit_usd=0.6)
    answers = [_raw(mcp_gateway, token, _tools_call("count", {}, i)).json() for i in range(3)]
    assert ["result" in a for a in answers] == [True, True, False]
    assert answers[2]["error"]["data"]["code"] == "cost_limit"
    task = mcp_admin.task(task_id)
    assert float(task["cost_usd"]) == pytest.approx(0.5) and task["tool_calls"] == 2


@pytest.mark.parametrize("case", ["unknown_server", "no_token", "unknown_token", "not_json", "batch",
                                  "not_json_rpc", "method_header", "name_header", "no_tool_name"])
def test_bad_requests_never_reach_the_server(mcp_gateway, mcp_admin, mcp_server, case):
    task_id, token = mcp_admin.create_task()
    call = _tools_call("count", {})
    sent = {
        "unknown_server": dict(server="nope"), "no_token": dict(token=None), "unknown_token": dict(token="tg-nope"),
        "not_json": dict(body=b"{not json"), "batch": dict(body=[call, call]),
        "not_json_rpc": dict(body={"id": 1, "method": "tools/call"}),
        "method_header": dict(headers={"mcp-method": "tools/list"}),
        "name_header": dict(headers={"mcp-method": "tools/call", "mcp-name": "grep"}),
        "no_tool_name": dict(body={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}),
    }[case]
    before = mcp_server.calls().get("count", 0)
    answer = _raw(mcp_gateway, sent.get("token", token), sent.get("body", call), server=sent.get("server", "fixture"),
                  headers=sent.get("headers"))
    expected = {"unknown_server": 404, "no_token": 401, "unknown_token": 401}.get(case, 400)
    assert answer.status_code == expected, answer.text
    assert "error" in answer.json() and answer.json()["jsonrpc"] == "2.0"
    assert mcp_server.calls().get("count", 0) == before
    assert mcp_admin.task(task_id)["tool_calls"] == 0


def test_a_server_that_is_down_is_named_and_not_a_failure(mcp_gateway, mcp_admin):
    task_id, token = mcp_admin.create_task()
    answer = _raw(mcp_gateway, token, _tools_call("anything", {}), server="down")
    assert answer.status_code == 200
    error = answer.json()["error"]
    assert error["code"] == -32002 and "'down'" in error["message"]
    task = mcp_admin.task(task_id)
    assert task["status"] == "active" and task["tool_calls"] == 1  # admitted before it was sent: counted


def test_a_silent_tool_is_cut_at_its_timeout(mcp_gateway, mcp_admin):
    _, token = mcp_admin.create_task()
    answer = _raw(mcp_gateway, token, _tools_call("slow", {"seconds": 30}))
    assert answer.status_code == 200 and answer.elapsed.total_seconds() < 10
    assert "did not answer 'slow' within 1 s" in answer.json()["error"]["message"]


def test_the_task_token_never_reaches_the_server_but_configured_headers_do(mcp_gateway, mcp_admin):
    from app.mcp.routes import FORWARDED_HEADERS

    assert "authorization" not in FORWARDED_HEADERS and "x-api-key" not in FORWARDED_HEADERS


def test_a_published_server_is_governed_too(mcp_gateway, mcp_admin):
    """``mcp-server-time`` from PyPI: its results pass as they are, and an agent converting
    the same time over and over is stopped at the 6th call."""
    task_id, token = mcp_admin.create_task()

    async def run() -> tuple[list[str], list]:
        out: list = []
        async with _client(mcp_gateway, token, "2026-07-28", server="time") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            for _ in range(6):
                try:
                    out.append(await client.call_tool(
                        "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}))
                except MCPError as exc:
                    out.append(exc)
        return names, out

    names, results = asyncio.run(run())
    assert {"get_current_time", "convert_time"} <= set(names)
    assert '"Asia/Tokyo"' in results[0].content[0].text and not results[0].is_error
    assert [isinstance(r, MCPError) for r in results] == [False] * 5 + [True]
    task = mcp_admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_call" and task["tool_calls"] == 5


def test_tool_calls_are_counted_in_prometheus(mcp_gateway, mcp_admin):
    _, token = mcp_admin.create_task()
    _raw(mcp_gateway, token, _tools_call("count", {}))
    text = httpx.get(mcp_gateway.url + "/metrics", timeout=10).text
    assert 'taskgate_mcp_calls_total{outcome="ok",server="fixture",tool="count"}' in text


def test_a_budget_keys_tool_calls_land_on_its_runs_task(mcp_gateway, mcp_admin):
    """A budget key names its run (x-taskgate-run) on /mcp as on /v1: both land on one task,
    so one latch stops both; without a run named, /mcp refuses the key (400)."""
    budget = f"team-{uuid.uuid4().hex[:6]}"
    assert mcp_admin.http.post("/admin/budgets", json={"id": budget, "request_limit": 1000}).status_code == 201
    key = mcp_admin.http.post(f"/admin/budgets/{budget}/keys", json={"template": {"request_limit": 50}}).json()["key"]
    run = {"x-taskgate-run": f"run-{uuid.uuid4().hex[:6]}"}
    model = openai.OpenAI(base_url=mcp_gateway.url + "/v1", api_key=key, max_retries=0, default_headers=run)
    model.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    for i in range(5):
        assert "result" in _raw(mcp_gateway, key, _tools_call("grep", {"pattern": "x"}, i), headers=run).json()
    answer = _raw(mcp_gateway, key, _tools_call("grep", {"pattern": "x"}, 9), headers=run).json()
    assert answer["error"]["data"]["code"] == "repeated_tool_call"
    with pytest.raises(openai.BadRequestError, match="repeated_tool_call"):
        model.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    tasks = mcp_admin.http.get("/admin/tasks", params={"budget": budget}).json()["data"]
    assert len(tasks) == 1 and tasks[0]["tool_calls"] == 5 and tasks[0]["admitted_requests"] == 1
    unnamed = _raw(mcp_gateway, key, _tools_call("grep", {"pattern": "x"}))
    assert unnamed.status_code == 400 and "x-taskgate-run" in unnamed.json()["error"]["message"]


def test_a_tool_call_is_an_execute_tool_span(database_url, upstream, mcp_server, time_server, tmp_path):
    """OpenTelemetry: a tools/call is a span named ``execute_tool <tool>`` (GenAI conventions)."""
    from tests.test_console_tracing import Receiver, attrs

    receiver = Receiver()
    config = tmp_path / "taskgate.yaml"
    config.write_text(_CONFIG.format(upstream=upstream.base_url, mcp=mcp_server.url, down=free_port(),
                                     time=time_server.url))
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_CONFIG=str(config), FIXTURE_SECRET="s",
                        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_BSP_SCHEDULE_DELAY="100") as gw:
        task_id, token = Admin(gw.url).create_task()
        assert "result" in _raw(gw, token, _tools_call("count", {})).json()
        (span,) = receiver.wait(lambda s: s.name == "execute_tool count")
    receiver.server.shutdown()
    a = attrs(span)
    assert a["gen_ai.operation.name"] == "execute_tool" and a["gen_ai.tool.name"] == "count"
    assert a["taskgate.mcp.server"] == "fixture" and a["taskgate.task.id"] == task_id
    assert a["gen_ai.tool.call.id"].startswith("mcp:") and a["taskgate.verdict"] == "ok"


def test_a_huge_result_is_judged_off_the_loop_and_bounded(mcp_gateway, mcp_admin):
    """An 800 K-character result (1.6 MB with its structured copy) passes (fingerprinted in a
    worker thread while /healthz answers); an answer over TASKGATE_MCP_MAX_ANSWER_BYTES (2 MB
    here) is a JSON-RPC error, the call counted."""
    task_id, token = mcp_admin.create_task()
    with ThreadPoolExecutor(1) as pool:
        big = pool.submit(_raw, mcp_gateway, token, _tools_call("big", {"chars": 800_000}))
        health = httpx.get(mcp_gateway.url + "/healthz", timeout=30)
        assert health.status_code == 200 and health.elapsed.total_seconds() < 1.0
        answer = big.result(timeout=60)
    assert answer.status_code == 200 and len(answer.json()["result"]["content"][0]["text"]) == 800_000
    over = _raw(mcp_gateway, token, _tools_call("big", {"chars": 3_000_000}, 2)).json()
    assert over["error"]["code"] == -32002 and "more than 2000000 bytes" in over["error"]["message"]
    assert mcp_admin.task(task_id)["tool_calls"] == 2


def test_a_session_works_through_any_replica(database_url, upstream, mcp_gateway, mcp_admin, mcp_server, time_server,
                                             tmp_path):
    """The gateway keeps no session state: a session opened (initialize, 2025-11-25)
    through one gateway goes on through another."""
    config = tmp_path / "taskgate.yaml"
    config.write_text(_CONFIG.format(upstream=upstream.base_url, mcp=mcp_server.url, down=free_port(),
                                     time=time_server.url))
    task_id, token = mcp_admin.create_task()
    legacy = {"mcp-protocol-version": "2025-11-25"}
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_CONFIG=str(config), FIXTURE_SECRET="s") as other:
        opened = _raw(mcp_gateway, token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            headers={**legacy, "mcp-method": "initialize"})
        session = {**legacy, "mcp-session-id": opened.headers["mcp-session-id"]}
        assert _raw(other, token, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers=session).status_code == 202
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "count", "arguments": {}}}
        answer = _raw(other, token, body, headers=session)
        assert answer.status_code == 200 and '"call ' in answer.text
    assert mcp_admin.task(task_id)["tool_calls"] == 1


def test_a_client_that_goes_away_cancels_the_call_upstream(mcp_gateway, mcp_admin, mcp_server):
    """A client that closes its tools/call while the tool runs: the gateway closes its
    request to the server, which cancels the tool (it never finishes); the call stays counted."""
    task_id, token = mcp_admin.create_task()
    before = mcp_server.calls()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{mcp_gateway.url}/mcp/fixture", json=_tools_call("slow", {"seconds": 0.9}), timeout=0.3,
                   headers={"authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
                            "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "slow"})
    time.sleep(2)
    after = mcp_server.calls()
    assert after.get("slow", 0) == before.get("slow", 0) + 1
    assert after.get("slow_done", 0) == before.get("slow_done", 0)
    assert mcp_admin.task(task_id)["tool_calls"] == 1
