"""Per-model limits and rates of a budget (issue 38 item 4), through two real gateway
processes on real PostgreSQL and a scripted upstream:

- ``requests_per_minute`` 5 and 20 concurrent requests over 4 tasks through 2 gateways:
  exactly 5 admitted, 15 refused with 429 ``rate_limited`` and ``Retry-After`` (also in the
  Anthropic shape), nothing counted for them, no task stopped;
- a dollar limit for one model glob: 40 concurrent requests through 2 gateways settle
  within it (held ones wait, then admitted or refused), requests to another model go on;
- a token limit for one model glob, refused once reached naming the glob, other models go on;
- ``tokens_per_minute``: refused with 429 once the minute's reported tokens reach it;
- bad input (a rate of 0, a bad glob, an entry limiting nothing, a glob twice): 422 with a sentence;
- what a rated budget's admissions cost (printed: admissions/s against a plain budget).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime, timezone
from decimal import Decimal
from typing import Iterator

import httpx
import pytest

from app.testing.upstream import UpstreamServer
from tests.browser import NULLISH, console_errors, css, login, wait
from tests.support import ADMIN_TOKEN, GatewayProcess, started

pytestmark = pytest.mark.timeout(300)

MODEL_A, MODEL_B = "rated-a-1", "rated-b-1"  # $100 per MTok in and out: 1,000 input tokens settle at $0.10
MODEL_C = "rated-c-1"  # the same on an anthropic provider
_CONFIG = """
providers:
  main:
    kind: openai
    base_url: {upstream}/v1
  anth:
    kind: anthropic
    base_url: {upstream}
models:
""" + "".join(f"""  - name: {m}
    provider: {provider}
    price: {{{{input_per_mtok: 100, output_per_mtok: 100}}}}
""" for m, provider in ((MODEL_A, "main"), (MODEL_B, "main"), (MODEL_C, "anth")))


@pytest.fixture(scope="module")
def gateways(database_url: str, priced_upstream: UpstreamServer,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    path = tmp_path_factory.mktemp("rates") / "taskgate.yaml"
    path.write_text(_CONFIG.format(upstream=priced_upstream.base_url))
    with started([GatewayProcess(database_url, priced_upstream.base_url, TASKGATE_CONFIG=str(path),
                                 TASKGATE_COST_WAIT_S="20") for _ in range(2)]) as procs:
        yield procs


@pytest.fixture(scope="module")
def api(gateways: list[GatewayProcess]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateways[0].url, timeout=30,
                      headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        yield client


def _budget(api: httpx.Client, **body: object) -> str:
    r = api.post("/admin/budgets", json={"id": f"r-{secrets.token_hex(4)}", **body})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _task(api: httpx.Client, **body: object) -> tuple[str, str]:
    r = api.post("/admin/tasks", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["token"]


def _chat(model: str, i: int = 0) -> dict:
    return {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": f"job {i}"}]}


def _post(url: str, token: str, model: str, i: int = 0) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=_chat(model, i),
                      headers={"authorization": f"Bearer {token}"}, timeout=60)


async def _storm(jobs: list[tuple[str, str, str]]) -> list[httpx.Response]:
    """POST one chat completion per ``(gateway url, token, model)``, all at once."""
    limits = httpx.Limits(max_connections=len(jobs), max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        return await asyncio.gather(*(
            client.post(url + "/v1/chat/completions", json=_chat(model, i),
                        headers={"authorization": f"Bearer {token}"})
            for i, (url, token, model) in enumerate(jobs)))


def _fresh_minute(room_s: float = 15) -> None:
    """Wait for a minute with at least ``room_s`` seconds left (a burst stays in one minute)."""
    now = datetime.now(timezone.utc)
    if now.second + now.microsecond / 1e6 > 60 - room_s:
        time.sleep(60.5 - now.second - now.microsecond / 1e6)


def _counts(responses: list[httpx.Response]) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in responses:
        out[r.status_code] = out.get(r.status_code, 0) + 1
    return out


def _until(check, timeout: float = 15):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_requests_per_minute_admits_exactly_the_rate_through_two_gateways(gateways, api, priced_upstream) -> None:
    budget = _budget(api, requests_per_minute=5, window="day")
    tasks = [_task(api, budget=budget, request_limit=100) for _ in range(4)]
    _fresh_minute()
    jobs = [(gateways[i % 2].url, tasks[i % 4][1], MODEL_A) for i in range(20)]
    responses = asyncio.run(_storm(jobs))
    assert _counts(responses) == {200: 5, 429: 15}, ([r.text for r in responses if r.status_code not in (200, 429)],
                                                     [gw.errors() for gw in gateways])
    assert len([r for r in priced_upstream.requests if r.method == "POST"]) == 5
    for r in (r for r in responses if r.status_code == 429):
        error = r.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limited"), error
        assert f"Budget '{budget}'" in error["message"] and "all 5 requests of its requests_per_minute" in \
            error["message"] and "Retry after" in error["message"], error
        assert 1 <= int(r.headers["retry-after"]) <= 60 and r.headers["x-should-retry"] == "true"
        assert r.headers["x-taskgate-budget"] == budget
    seen = [api.get(f"/admin/tasks/{task_id}").json() for task_id, _ in tasks]
    assert sum(t["admitted_requests"] for t in seen) == 5
    assert {(t["status"], t["refused_requests"]) for t in seen} == {("active", 0)}  # not a stop, nothing counted
    view = api.get(f"/admin/budgets/{budget}").json()
    assert view["current"]["admitted_requests"] == 5 and view["requests_per_minute"] == 5
    assert view["minute"]["requests"] == 5
    # the Anthropic shape on /v1/messages, from the other gateway
    anthropic = httpx.post(gateways[1].url + "/v1/messages", json={
        "model": MODEL_C, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": tasks[0][1], "anthropic-version": "2023-06-01"}, timeout=30)
    assert anthropic.status_code == 429, anthropic.text
    assert anthropic.json()["type"] == "error" and anthropic.json()["error"]["type"] == "rate_limit_error"
    assert "requests_per_minute" in anthropic.json()["error"]["message"] and "retry-after" in anthropic.headers
    # the next minute admits again
    time.sleep(float(anthropic.headers["retry-after"]) + 0.5)
    assert _post(gateways[1].url, tasks[1][1], MODEL_A).status_code == 200


def test_a_model_dollar_limit_settles_within_it_and_other_models_go_on(gateways, api, priced_upstream) -> None:
    budget = _budget(api, window="month", model_limits=[{"model": "rated-a*", "cost_limit_usd": 0.5}])
    tokens = [_task(api, budget=budget, request_limit=1000)[1] for _ in range(8)]
    priced_upstream.script("delay", delay_s=0.2, input_tokens=1000, output_tokens=0)  # settles at $0.10
    jobs = [(gateways[i % 2].url, tokens[i % 8], MODEL_A) for i in range(40)]
    responses = asyncio.run(_storm(jobs))
    counts = _counts(responses)
    assert set(counts) <= {200, 400, 429}, [gw.errors() for gw in gateways]
    print(f"\nglob limit $0.50, 40 concurrent requests of ~$0.12 worst case, $0.10 settled: {counts}")
    refused = [r.json()["error"] for r in responses if r.status_code != 200]
    assert {e["code"] for e in refused} <= {"budget_exhausted", "cost_reserved"}
    exhausted = next(e for e in refused if e["code"] == "budget_exhausted")
    assert "its limit for models 'rated-a*'" in exhausted["message"] and f"'{MODEL_A}'" in exhausted["message"]
    assert "other models are still admitted" in exhausted["message"]
    view = _until(lambda: (v := api.get(f"/admin/budgets/{budget}").json())["current"]["reserved_usd"] == 0 and v)
    spent = Decimal(str(view["current"]["models"][0]["cost_usd"]))
    assert view["current"]["models"][0]["model"] == "rated-a*"
    assert spent == Decimal(counts[200]) * Decimal("0.1") == Decimal(str(view["current"]["cost_usd"]))
    assert Decimal("0.3") <= spent <= Decimal("0.5"), spent  # within it, refused only near it (worst ~ $0.12)
    assert view["current"]["models"][0]["admitted_requests"] == counts[200]
    assert len([r for r in priced_upstream.requests if r.method == "POST"]) == counts[200]
    # another model is not limited by the glob; the limited one stays refused
    assert _post(gateways[1].url, tokens[0], MODEL_B).status_code == 200
    again = _post(gateways[0].url, tokens[1], MODEL_A)
    assert again.status_code == 400 and again.json()["error"]["code"] == "budget_exhausted", again.text
    tasks = api.get("/admin/tasks", params={"budget": budget}).json()["data"]
    assert {t["status"] for t in tasks} == {"active"} and sum(t["refused_requests"] for t in tasks) == 0


def test_a_model_token_limit_refuses_that_glob_only(gateways, api, priced_upstream) -> None:
    budget = _budget(api, window="day", model_limits=[{"model": "rated-a-?", "token_limit": 2500}])
    _, token = _task(api, budget=budget, request_limit=100)
    priced_upstream.script("text", input_tokens=1000, output_tokens=0)
    for i in range(3):  # 0, 1,000, 2,000 tokens before each: under 2,500
        assert _post(gateways[i % 2].url, token, MODEL_A, i).status_code == 200
        _until(lambda: api.get(f"/admin/budgets/{budget}").json()["current"]["models"][0]["input_tokens"]
               == 1000 * (i + 1))
    refused = _post(gateways[1].url, token, MODEL_A)
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "its limit for models 'rated-a-?'" in message and "3000 tokens reported" in message, message
    assert _post(gateways[0].url, token, MODEL_B).status_code == 200
    assert api.get(f"/admin/budgets/{budget}").json()["current"]["models"][0]["total_tokens"] == 3000


def test_tokens_per_minute_refuses_once_the_minute_reported_them(gateways, api, priced_upstream) -> None:
    budget = _budget(api, tokens_per_minute=1500)
    _, token = _task(api, budget=budget, request_limit=100)
    priced_upstream.script("text", input_tokens=1000, output_tokens=0)
    _fresh_minute(25)
    for i in range(2):  # 0 and 1,000 tokens reported in the minute before each
        assert _post(gateways[i].url, token, MODEL_A, i).status_code == 200
        assert _until(lambda: api.get(f"/admin/budgets/{budget}").json()["minute"]["tokens"] == 1000 * (i + 1))
    refused = _post(gateways[0].url, token, MODEL_B)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limited" and "tokens_per_minute of 1500" in \
        refused.json()["error"]["message"] and int(refused.headers["retry-after"]) >= 1


def test_a_rate_set_on_a_budget_paid_by_escrow_leases_applies_at_once(gateways, api, priced_upstream) -> None:
    budget = _budget(api, request_limit=100_000)
    _, token = _task(api, budget=budget, request_limit=1000)
    for i in range(4):  # both gateways take escrow leases of the budget's window
        assert _post(gateways[i % 2].url, token, MODEL_A, i).status_code == 200
    assert api.patch(f"/admin/budgets/{budget}", json={"requests_per_minute": 2}).status_code == 200
    _fresh_minute()
    statuses = [_post(gateways[i % 2].url, token, MODEL_A, i).status_code for i in range(5)]
    assert statuses == [200, 200, 429, 429, 429]  # the leases no longer pay: the locked path counts the rate


@pytest.mark.parametrize("body, says", [
    ({"requests_per_minute": 0}, "a rate of 0 would admit nothing"),
    ({"tokens_per_minute": -5}, "a rate of -5 would admit nothing"),
    ({"model_limits": [{"model": "gpt-[4", "token_limit": 5}]}, "never closes it"),
    ({"model_limits": [{"model": "gpt 4", "token_limit": 5}]}, "spaces and control characters"),
    ({"model_limits": [{"model": "", "token_limit": 5}]}, "non-empty"),
    ({"model_limits": [{"model": "gpt-4*"}]}, "sets neither cost_limit_usd nor token_limit"),
    ({"model_limits": [{"model": "a*", "token_limit": 1}, {"model": "a*", "token_limit": 2}]}, "listed twice"),
    ({"model_limits": [{"model": "a*", "cost_limit_usd": -1}]}, "greater than or equal to 0"),
])
def test_bad_rates_and_model_limits_are_422_with_a_sentence(api, body, says) -> None:
    r = api.post("/admin/budgets", json=body)
    assert r.status_code == 422 and says in r.json()["error"]["message"], r.text
    budget = _budget(api)
    patched = api.patch(f"/admin/budgets/{budget}", json=body)
    assert patched.status_code == 422 and says in patched.json()["error"]["message"], patched.text


def test_rates_and_model_limits_are_changed_and_removed(api) -> None:
    budget = _budget(api, requests_per_minute=10, model_limits=[{"model": "gpt-4*", "cost_limit_usd": 2.5}])
    view = api.get(f"/admin/budgets/{budget}").json()
    assert view["model_limits"] == [{"model": "gpt-4*", "cost_limit_usd": 2.5, "token_limit": None}]
    assert (view["requests_per_minute"], view["tokens_per_minute"]) == (10, None)
    changed = api.patch(f"/admin/budgets/{budget}", json={"tokens_per_minute": 9000, "model_limits": [],
                                                          "requests_per_minute": None}).json()
    assert (changed["requests_per_minute"], changed["tokens_per_minute"], changed["model_limits"]) == (None, 9000, [])


def test_what_a_rated_budget_costs_in_admissions_per_second(gateways, api, priced_upstream) -> None:
    """Printed, not asserted tightly: a rated budget's admissions run one at a time (its
    window row locked), a plain budget's on escrow leases."""
    priced_upstream.script("text")
    rated = _budget(api, requests_per_minute=1_000_000)
    plain = _budget(api)
    rates = {}
    for name, budget in (("plain", plain), ("rated", rated), ("plain", plain), ("rated", rated)):
        tokens = [_task(api, budget=budget, request_limit=10_000)[1] for _ in range(16)]
        jobs = [(gateways[i % 2].url, tokens[i % 16], MODEL_A) for i in range(400)]

        async def run() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=32)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                gate = asyncio.Semaphore(32)

                async def one(i: int, url: str, token: str, model: str) -> httpx.Response:
                    async with gate:
                        return await client.post(url + "/v1/chat/completions", json=_chat(model, i),
                                                 headers={"authorization": f"Bearer {token}"})
                return await asyncio.gather(*(one(i, *job) for i, job in enumerate(jobs)))

        t0 = time.monotonic()
        responses = asyncio.run(run())
        took = time.monotonic() - t0
        assert _counts(responses) == {200: 400}
        rates.setdefault(name, []).append(400 / took)
    print(f"\nrequests/s through 2 gateways, c=32, 400 requests per round: plain budget "
          f"{', '.join(f'{r:.0f}' for r in rates['plain'])}; with requests_per_minute "
          f"{', '.join(f'{r:.0f}' for r in rates['rated'])}")


def test_cli_sets_rates_and_model_limits(gateways) -> None:
    from click.testing import CliRunner

    from app.cli import main as cli

    runner = CliRunner(env={"TASKGATE_URL": gateways[0].url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN})
    name = f"r-{secrets.token_hex(4)}"
    made = runner.invoke(cli, ["budgets", "create", "--id", name, "--requests-per-minute", "30",
                               "--model-limit", "gpt-4*:cost=5:tokens=100000", "--json"])
    assert made.exit_code == 0, made.output
    assert '"requests_per_minute": 30' in made.output and '"model": "gpt-4*"' in made.output
    shown = runner.invoke(cli, ["budgets", "show", name])
    assert "30 requests/min" in shown.output and "gpt-4*" in shown.output, shown.output
    bad = runner.invoke(cli, ["budgets", "update", name, "--requests-per-minute", "0"])
    assert bad.exit_code != 0 and "a rate of 0 would admit nothing" in bad.output, bad.output
    none = runner.invoke(cli, ["budgets", "update", name, "--model-limit", "none", "--tokens-per-minute", "none",
                               "--json"])
    assert none.exit_code == 0 and '"model_limits": []' in none.output, none.output


def test_the_dashboard_shows_rates_and_model_limits(page_gateway, page_admin, driver) -> None:
    """The budget's page lists its rates with this minute's count and each glob's limits
    with its spend (headless Chromium, on a gateway with a database of its own)."""
    import openai

    budget = f"rated-{secrets.token_hex(3)}"
    assert page_admin.http.post("/admin/budgets", json={"id": budget, "requests_per_minute": 100, "model_limits": [
        {"model": "m*", "token_limit": 50_000}]}).status_code == 201
    _, token = page_admin.create_task(budget=budget)
    openai.OpenAI(base_url=page_gateway.url + "/v1", api_key=token, max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}])
    login(driver, page_gateway.url, ADMIN_TOKEN)
    driver.get(page_gateway.url + f"/ui/#/budget/{budget}")
    wait(driver, lambda d: "per minute" in css(d, "#rates").text, "the rates")
    assert "100 requests per minute (this minute: 1 requests" in css(driver, "#rates").text
    wait(driver, lambda d: "/ 50,000 tokens" in css(d, "#model-limits").text or
         "/ 50000 tokens" in css(d, "#model-limits").text, "the model limits")
    assert css(driver, "#model-limits").text.startswith("m*: ")
    assert not NULLISH.search(css(driver, "main").text)
    assert not console_errors(driver)
