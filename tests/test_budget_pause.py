"""A budget's kill switch (issue 38 item 3), through real gateway processes on real
PostgreSQL, with the official openai and anthropic SDKs as agents.

- 40 tasks streaming at once through 2 gateways, half under the paused budget, half under
  a budget nested in it: one ``POST /admin/budgets/{id}/pause`` on one gateway cuts every
  stream on both within 1 s (each SDK raises the ``budget_paused`` error), every next
  request is refused with a sentence naming the pause (not counted, the task not
  stopped), a sibling budget's stream goes on; ``/resume`` and every task is admitted
  again through both gateways, with no per-task action;
- a gateway partitioned from PostgreSQL while the budget is paused (its escrow lease
  holds unspent requests) refuses the budget's first request once it reconnects and cuts
  its open stream then;
- the admin API's bad input and the CLI.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest

from tests.partition import Partition
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess, priced_config

BOUND_S = 1.0  # the bound for every stream of the budget
STALL = "scenario:stall"  # one content event, then an hour of silence
STREAMS = 40
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def second(database_url, upstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, upstream.base_url) as gw:
        yield gw


def _budget(admin: Admin, **body: object) -> str:
    r = admin.http.post("/admin/budgets", json={"id": f"b-{secrets.token_hex(4)}", **body})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(url: str, token: str, wire: str) -> str:
    """One small request through the SDK of ``wire``; its answer's text."""
    if wire == "anthropic":
        client = anthropic.Anthropic(base_url=url, api_key=token, max_retries=0)
        message = client.messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
        return "".join(b.text for b in message.content if b.type == "text")
    chat = openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}])
    return chat.choices[0].message.content or ""


class Stream(threading.Thread):
    """A streamed request of an SDK in a thread: ``opened`` once content arrived,
    ``error`` the exception the SDK raised when the stream ended, ``ended_at`` when."""

    def __init__(self, url: str, token: str, wire: str) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.wire = url, token, wire
        self.opened = threading.Event()
        self.error: Exception | None = None
        self.ended_at: float | None = None

    def run(self) -> None:
        try:
            if self.wire == "anthropic":
                client = anthropic.Anthropic(base_url=self.url, api_key=self.token, max_retries=0, timeout=120)
                for _ in client.messages.create(model=STALL, max_tokens=50, stream=True,
                                                messages=[{"role": "user", "content": "go"}]):
                    self.opened.set()
            else:
                client = openai.OpenAI(base_url=self.url + "/v1", api_key=self.token, max_retries=0, timeout=120)
                for _ in client.chat.completions.create(model=STALL, stream=True,
                                                        messages=[{"role": "user", "content": "go"}]):
                    self.opened.set()
        except Exception as exc:  # noqa: BLE001 - what the agent would see
            self.error = exc
        self.ended_at = time.monotonic()
        self.opened.set()


def _open(url: str, token: str, wire: str) -> Stream:
    s = Stream(url, token, wire)
    s.start()
    return s


def _task(admin: Admin, budget: str) -> tuple[str, str]:
    return admin.create_task(budget=budget, request_limit=1000, stream_idle_timeout_s=600,
                             stream_first_event_timeout_s=600)


def _refused(url: str, token: str, wire: str) -> Any:
    """The SDK's error for one request that must be refused."""
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
        _ask(url, token, wire)
    return caught.value


def test_pause_cuts_every_stream_in_both_gateways_refuses_and_resume_restores(gateway, second, admin, upstream):
    org = _budget(admin, request_limit=100_000)
    team = _budget(admin, parent=org, request_limit=50_000)
    sibling = _budget(admin)
    gateways = [gateway, second]
    tasks = [(*_task(admin, org if i % 2 else team), gateways[i % 2].url, ("openai", "anthropic")[(i // 2) % 2])
             for i in range(STREAMS)]
    other_id, other_token = _task(admin, sibling)
    streams = [_open(url, token, wire) for _, token, url, wire in tasks]
    other = _open(second.url, other_token, "openai")
    for s in (*streams, other):
        assert s.opened.wait(30) and s.ended_at is None, s.error
    t0 = time.monotonic()
    r = admin.http.post(f"/admin/budgets/{org}/pause", json={"reason": "incident 42: runaway spend", "by": "alice"})
    assert r.status_code == 200, r.text
    assert r.json()["paused_by"] == "alice" and r.json()["paused_at"] is not None
    for s in streams:
        s.join(BOUND_S + 10)
    took = [s.ended_at - t0 for s in streams if s.ended_at is not None]
    print(f"\npause of a budget with {STREAMS} open streams on 2 gateways: every stream cut after "
          f"{max(took) * 1000:.0f} ms at most (median {sorted(took)[len(took) // 2] * 1000:.0f} ms)")
    assert len(took) == STREAMS, "a stream was not cut"
    assert max(took) < BOUND_S
    for s in streams:
        assert s.error is not None and f"Budget '{org}'" in str(s.error) and "is paused" in str(s.error), s.error
    assert other.ended_at is None  # another budget's task streams on

    counted = {task_id: admin.task(task_id)["admitted_requests"] for task_id, *_ in tasks}
    for task_id, token, url, wire in tasks:
        for gw in gateways:
            err = _refused(gw.url, token, wire)
            text = str(err)
            assert f"Budget '{org}'" in text and "is paused" in text and "by alice" in text, text
            assert "incident 42: runaway spend" in text and f"taskgate budgets resume {org}" in text, text
            assert err.response.headers["x-taskgate-budget"] == org
    for task_id, *_ in tasks:
        task = admin.task(task_id)
        assert task["status"] == "active" and task["admitted_requests"] == counted[task_id], task
    nested = _refused(gateway.url, tasks[0][1], "openai")
    assert f"which budget '{team}' nests in" in str(nested)
    assert admin.http.get(f"/admin/budgets/{team}").json()["paused_at"] is None  # only org is paused
    event = admin.wait_for_event(tasks[0][0], "cut_open_requests")
    assert event["reason"] == "budget_paused" and event["detail"]["budget"] == org
    assert f"The pause of budget '{org}' cut 1 open request(s)" in event["message"]

    r = admin.http.post(f"/admin/budgets/{org}/resume", json={"reason": "fixed", "by": "bob"})
    assert r.status_code == 200 and r.json()["paused_at"] is None, r.text
    for _, token, url, wire in tasks:
        for gw in gateways:
            assert _ask(gw.url, token, wire)
    kinds = [(e["kind"], e["detail"]["by"]) for e in admin.http.get(f"/admin/budgets/{org}/events").json()["data"]]
    assert kinds == [("paused", "alice"), ("resumed", "bob")]
    admin.http.post(f"/admin/tasks/{other_id}/stop", json={"reason": "manual"})
    other.join(15)
    assert other.ended_at is not None


def test_a_partitioned_gateway_refuses_and_cuts_once_it_reconnects(database_url, upstream, admin):
    budget = _budget(admin, request_limit=10_000)
    task_id, token = _task(admin, budget)
    with Partition(database_url) as partition, \
            GatewayProcess(partition.url(), upstream.base_url, TASKGATE_DATABASE_TIMEOUT_S="2") as far:
        assert _ask(far.url, token, "openai")  # its escrow lease now holds unspent requests
        stream = _open(far.url, token, "openai")
        assert stream.opened.wait(30) and stream.ended_at is None, stream.error
        partition.cut()
        r = admin.http.post(f"/admin/budgets/{budget}/pause", json={"reason": "drill"})
        assert r.status_code == 200, r.text
        time.sleep(1.0)
        assert stream.ended_at is None  # it cannot know yet
        partition.heal()
        healed = time.monotonic()
        deadline = healed + 30
        while True:  # 503 until its pool has a connection again, then the pause: never admitted
            r = httpx.post(far.url + "/v1/chat/completions", timeout=30, headers={"authorization": f"Bearer {token}"},
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            if r.status_code != 503:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.1)
        assert r.status_code == 400 and r.json()["error"]["code"] == "budget_paused", r.text
        stream.join(10)
        assert stream.ended_at is not None, "the open stream was not cut after the partition healed"
        print(f"\npartition healed -> stream cut on the far gateway after {(stream.ended_at - healed) * 1000:.0f} ms")
        assert "is paused" in str(stream.error), stream.error
    assert admin.task(task_id)["admitted_requests"] == 2 and admin.task(task_id)["status"] == "active"


def test_a_chain_with_a_dollar_ceiling_is_refused_in_the_locked_path(database_url, priced_upstream, tmp_path):
    """A chain with a dollar ceiling takes no escrow lease: its admission reads the chain
    under the task's lock, and refuses there."""
    config = priced_config(tmp_path, priced_upstream.base_url, "priced", 100)
    with GatewayProcess(database_url, priced_upstream.base_url, TASKGATE_CONFIG=str(config)) as gw:
        admin = Admin(gw.url)
        org = _budget(admin, cost_limit_usd=100)
        team = _budget(admin, parent=org)
        task_id, token = admin.create_task(budget=team, request_limit=10)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0)
        ask = lambda: client.chat.completions.create(  # noqa: E731
            model="priced", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
        assert ask().choices[0].message.content
        assert admin.http.post(f"/admin/budgets/{org}/pause", json={"reason": "drill"}).status_code == 200
        with pytest.raises(openai.BadRequestError) as caught:
            ask()
        assert caught.value.code == "budget_paused" and f"Budget '{org}', which budget '{team}' nests in" in str(
            caught.value)
        assert admin.task(task_id)["admitted_requests"] == 1
        assert admin.http.get(f"/admin/budgets/{org}").json()["current"]["admitted_requests"] == 1
        assert admin.http.post(f"/admin/budgets/{org}/resume", json={"reason": "ok"}).status_code == 200
        assert ask().choices[0].message.content
        assert admin.task(task_id)["admitted_requests"] == 2


_MCP_CONFIG = """
providers:
  main: {{kind: openai, base_url: "{upstream}/v1"}}
models:
  - {{name: "*", provider: main}}
mcp_servers:
  - {{name: fixture, url: "{mcp}"}}
"""


def test_a_tool_call_through_the_mcp_gateway_is_refused_too(database_url, upstream, tmp_path):
    from tests.mcp_fixture import McpFixture

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "count", "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}}}
    with McpFixture() as server:
        config = tmp_path / "taskgate.yaml"
        config.write_text(_MCP_CONFIG.format(upstream=upstream.base_url, mcp=server.url))
        with GatewayProcess(database_url, upstream.base_url, TASKGATE_CONFIG=str(config)) as gw:
            admin = Admin(gw.url)
            budget = _budget(admin)
            task_id, token = admin.create_task(budget=budget)

            def tool_call() -> httpx.Response:
                return httpx.post(f"{gw.url}/mcp/fixture", json=call, timeout=30, headers={
                    "authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
                    "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "count"})
            assert tool_call().status_code == 200
            admin.http.post(f"/admin/budgets/{budget}/pause", json={"reason": "drill"})
            refused = tool_call()
            assert refused.status_code == 400 and "is paused" in refused.text, refused.text
            assert server.calls().get("count") == 1 and admin.task(task_id)["tool_calls"] == 1


def test_bad_input_is_a_clear_4xx(admin):
    budget = _budget(admin)
    missing = admin.http.post("/admin/budgets/no-such-budget/pause", json={"reason": "x"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "budget_not_found"
    assert admin.http.post("/admin/budgets/no-such-budget/resume", json={"reason": "x"}).status_code == 404
    assert admin.http.get("/admin/budgets/no-such-budget/events").status_code == 404
    assert admin.http.post(f"/admin/budgets/{budget}/pause", json={}).status_code == 422  # a reason is required
    assert admin.http.post(f"/admin/budgets/{budget}/pause", json={"reason": ""}).status_code == 422
    assert admin.http.post(f"/admin/budgets/{budget}/pause", json={"reason": "x", "who": "a"}).status_code == 422
    not_paused = admin.http.post(f"/admin/budgets/{budget}/resume", json={"reason": "x"})
    assert not_paused.status_code == 409 and not_paused.json()["error"]["code"] == "budget_not_paused"
    first = admin.http.post(f"/admin/budgets/{budget}/pause", json={"reason": "first", "by": "alice"}).json()
    again = admin.http.post(f"/admin/budgets/{budget}/pause", json={"reason": "second", "by": "bob"})
    assert again.status_code == 200  # pausing a paused budget keeps its first pause
    assert (again.json()["paused_by"], again.json()["paused_reason"]) == ("alice", "first")
    assert again.json()["paused_at"] == first["paused_at"]


def test_cli_pauses_and_resumes(gateway, admin):
    from click.testing import CliRunner

    from app.cli import main as cli

    budget = _budget(admin)
    env = {"TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    runner = CliRunner()
    paused = runner.invoke(cli, ["budgets", "pause", budget, "--reason", "drill", "--by", "carol"], env=env)
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.output and "carol: drill" in paused.output
    listed = runner.invoke(cli, ["budgets", "list"], env=env)
    assert f"{budget} (paused)" in listed.output
    resumed = runner.invoke(cli, ["budgets", "resume", budget, "--reason", "done", "--json"], env=env)
    assert resumed.exit_code == 0 and json.loads(resumed.output)["paused_at"] is None
    again = runner.invoke(cli, ["budgets", "resume", budget, "--reason", "done"], env=env)
    assert again.exit_code != 0 and "is not paused" in again.output
    history = runner.invoke(cli, ["budgets", "events", budget], env=env)
    assert "paused" in history.output and "resumed" in history.output and "carol" in history.output
