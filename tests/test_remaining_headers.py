"""The remaining allowance in-band (issue 38 item 2): every proxied response carries
``x-taskgate-remaining-requests``, ``-tokens``, ``-usd`` and ``-reset``, read from the
statement that admitted the request, and they match the admin API's figures. Real
PostgreSQL, two real gateways, the official openai and anthropic SDKs."""

from __future__ import annotations

import secrets
from decimal import Decimal
from typing import Iterator

import anthropic
import openai
import pytest

from app.budgets import room
from tests.support import Admin, GatewayProcess, priced_config
from tests.task_values import task_value

pytestmark = pytest.mark.timeout(300)
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def second(database_url, upstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, upstream.base_url) as gw:
        yield gw


def _budget(admin: Admin, **body: object) -> dict:
    r = admin.http.post("/admin/budgets", json={"id": f"r-{secrets.token_hex(4)}", **body})
    assert r.status_code == 201, r.text
    return r.json()


def _chat(url: str, token: str, stream: bool = False, **extra: object) -> dict[str, str]:
    """One chat completion through the openai SDK; the response's headers."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=USER, stream=stream, **extra)
    if stream:
        for _ in raw.parse():
            pass
    return dict(raw.headers)


def test_a_task_without_a_budget_gets_its_own_room(gateway, admin):
    _, token = admin.create_task(request_limit=5, token_limit=1000)
    first = _chat(gateway.url, token)
    assert first["x-taskgate-remaining-requests"] == "4" and first["x-taskgate-remaining-tokens"] == "1000"
    assert "x-taskgate-remaining-usd" not in first and "x-taskgate-remaining-reset" not in first
    second = _chat(gateway.url, token, stream=True)
    assert second["x-taskgate-remaining-requests"] == "3"
    assert int(second["x-taskgate-remaining-tokens"]) < 1000  # the first answer's tokens are counted
    client = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0)
    raw = client.messages.with_raw_response.create(model="m", max_tokens=20, messages=USER)
    assert raw.headers["x-taskgate-remaining-requests"] == "2"


def test_budget_headers_match_the_admin_api_through_two_gateways(gateway, second, admin):
    budget = _budget(admin, window="day", request_limit=100, token_limit=100_000)
    tasks = [admin.create_task(budget=budget["id"], request_limit=1000)[1] for _ in range(2)]
    for i in range(12):
        gw = (gateway, second)[i % 2]
        headers = _chat(gw.url, tasks[i % 2], stream=bool(i % 3 == 0))
        now = admin.http.get(f"/admin/budgets/{budget['id']}").json()["current"]
        assert headers["x-taskgate-remaining-requests"] == str(100 - now["admitted_requests"]) == str(100 - i - 1)
        assert headers["x-taskgate-remaining-reset"] == now["resets_at"].replace("+00:00", "Z")
        assert int(headers["x-taskgate-remaining-tokens"]) >= 100_000 - now["total_tokens"]
    # the locked path (a request carrying a tool result spends its lease in the transaction)
    tool_turn = [{"role": "user", "content": "read it"},
                 {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                  "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}]},
                 {"role": "tool", "tool_call_id": "call_1", "content": "text"}]
    client = openai.OpenAI(base_url=second.url + "/v1", api_key=tasks[0], max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=tool_turn)
    now = admin.http.get(f"/admin/budgets/{budget['id']}").json()["current"]
    assert raw.headers["x-taskgate-remaining-requests"] == str(100 - now["admitted_requests"]) == "87"


def test_far_from_the_wall_the_figure_is_at_most_the_leases_short(gateway, second, admin):
    """A budget whose leases hold under 10 % of what is left reads no other lease: the
    figure is what no gateway holds set aside plus this lease's own, at most the window's
    leased requests short of the exact one."""
    budget = _budget(admin, request_limit=1_000_000)
    tasks = [admin.create_task(budget=budget["id"], request_limit=10**9)[1] for _ in range(2)]
    for i in range(8):
        headers = _chat((gateway, second)[i % 2].url, tasks[i % 2])
        now = admin.http.get(f"/admin/budgets/{budget['id']}").json()["current"]
        exact = 1_000_000 - now["admitted_requests"]
        assert exact - now["leased_requests"] <= int(headers["x-taskgate-remaining-requests"]) <= exact
        assert now["leased_requests"] * 10 < exact  # this branch


def test_the_task_binds_when_it_has_less_room_than_its_budget(gateway, admin):
    budget = _budget(admin, request_limit=1000)
    _, token = admin.create_task(budget=budget["id"], request_limit=3)
    assert _chat(gateway.url, token)["x-taskgate-remaining-requests"] == "2"
    assert "x-taskgate-remaining-reset" not in _chat(gateway.url, token)  # a lifetime budget never resets


def test_a_dollar_ceiling_says_what_is_left_in_dollars(database_url, priced_upstream, tmp_path):
    config = priced_config(tmp_path, priced_upstream.base_url, "priced", 100)
    with GatewayProcess(database_url, priced_upstream.base_url, TASKGATE_CONFIG=str(config)) as gw:
        admin = Admin(gw.url)
        budget = _budget(admin, window="month", cost_limit_usd=50, request_limit=40)
        task_id, token = admin.create_task(budget=budget["id"], cost_limit_usd=20)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0)
        for _ in range(3):
            spent = Decimal(str(admin.task(task_id)["cost_usd"]))  # settled before this request
            raw = client.chat.completions.with_raw_response.create(model="priced", max_tokens=50, messages=USER)
            left = Decimal(raw.headers["x-taskgate-remaining-usd"])
            assert Decimal(19) < left < Decimal(20) - spent  # the task's ceiling binds; this worst case is held
            now = admin.http.get(f"/admin/budgets/{budget['id']}").json()["current"]
            assert raw.headers["x-taskgate-remaining-requests"] == str(40 - now["admitted_requests"])
            assert raw.headers["x-taskgate-remaining-reset"] == now["resets_at"].replace("+00:00", "Z")


def test_headers_are_pure_functions_of_the_rooms():
    task = room.of_task(task_value(request_limit=10, admitted_requests=4, input_tokens=5, output_tokens=5,
                                   cost_limit_usd=Decimal("2"), cost_usd=Decimal("0.5"), reserved_usd=Decimal("0.25")))
    assert (task.requests, task.tokens, task.usd) == (6, None, Decimal("1.25"))
    chain = room.combine([room.budget(100, None, None, 3, None, None, None),
                          room.budget(1000, 10_000, None, 900, 5, None, None)])
    assert chain is not None and (chain.requests, chain.tokens) == (3, 5)
    assert dict(room.headers(task, chain)) == {b"x-taskgate-remaining-requests": b"3",
                                               b"x-taskgate-remaining-tokens": b"5",
                                               b"x-taskgate-remaining-usd": b"1.250000"}
    assert dict(room.headers(room.Room(requests=-2), None)) == {b"x-taskgate-remaining-requests": b"0"}



_AGENT = """
import openai
client = openai.OpenAI(max_retries=0)
for _ in range(2):
    raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
print(raw.headers["x-taskgate-remaining-requests"], raw.headers["x-taskgate-remaining-reset"])
"""


def test_taskgate_run_prints_what_remains_when_the_run_ends(gateway, admin):
    import os
    import subprocess
    import sys

    from tests.support import ADMIN_TOKEN

    budget = _budget(admin, window="week", request_limit=50)
    env = {**os.environ, "TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    proc = subprocess.run([sys.executable, "-m", "app.cli", "run", "--budget", budget["id"], "--request-limit", "10",
                           "--", sys.executable, "-c", _AGENT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    left, reset = proc.stdout.split()
    assert left == "8"  # the task's 10 binds, not the budget's 50
    assert f"taskgate: remaining 8 requests; budget window resets at {reset.replace('Z', '')}" in proc.stderr.replace(
        "+00:00", ""), proc.stderr
