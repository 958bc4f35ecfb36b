"""GET /metrics against a real gateway process: what the Prometheus counters,
histograms and the open-streams gauge say after real requests through the official
SDKs, the bearer protection, and multiprocess mode with ``--workers 2``."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from app.console import metrics
from tests.console_support import sample, scrape
from tests.support import GatewayProcess

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "hi"}]


def _client(gateway: GatewayProcess, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)


def test_forwarded_stream_counts_request_tokens_and_ttft(gateway, admin):
    _, token = admin.create_task()
    before = scrape(gateway.url)
    stream = _client(gateway, token).chat.completions.create(
        model="mock-model", messages=USER, stream=True, stream_options={"include_usage": True})
    usage = [c.usage for c in stream if c.usage][-1]
    after = scrape(gateway.url)
    delta = lambda name, **labels: sample(after, name, **labels) - sample(before, name, **labels)  # noqa: E731
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="forwarded") == 1
    assert delta("taskgate_tokens_total", direction="input") == usage.prompt_tokens
    assert delta("taskgate_tokens_total", direction="output") == usage.completion_tokens
    assert delta("taskgate_time_to_first_token_seconds_count", endpoint=CHAT) == 1
    assert delta("taskgate_upstream_duration_seconds_count", endpoint=CHAT) == 1
    assert delta("taskgate_admission_duration_seconds_count") >= 1
    assert sample(after, "taskgate_open_streams") == 0


def test_refusal_counts_stop_and_refusal_by_reason(gateway, admin):
    _, token = admin.create_task(request_limit=1)
    client = _client(gateway, token)
    before = scrape(gateway.url)
    client.chat.completions.create(model="mock-model", messages=USER)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="mock-model", messages=USER)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="mock-model", messages=USER)
    after = scrape(gateway.url)
    delta = lambda name, **labels: sample(after, name, **labels) - sample(before, name, **labels)  # noqa: E731
    assert delta("taskgate_task_stops_total", reason="request_limit") == 1
    assert delta("taskgate_refusals_total", reason="request_limit") == 2
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="refused") == 2
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="forwarded") == 1


def test_invalid_and_tool_calls_and_stream_cut(gateway, admin):
    _, token = admin.create_task(stream_first_event_timeout_s=1.0, stream_idle_timeout_s=0.3)
    before = scrape(gateway.url)
    r = httpx.post(gateway.url + CHAT, content=b"{not json", timeout=10,
                   headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 400
    client = _client(gateway, token)
    client.chat.completions.create(model="scenario:tool_call", messages=USER)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="scenario:stall", messages=USER, stream=True):
            pass
    after = scrape(gateway.url)
    delta = lambda name, **labels: sample(after, name, **labels) - sample(before, name, **labels)  # noqa: E731
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="invalid") == 1
    assert delta("taskgate_tool_calls_total") == 1
    assert delta("taskgate_stream_cuts_total", code="stream_idle_timeout") == 1
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="upstream_error") == 1
    assert sample(after, "taskgate_open_streams") == 0


def test_dollars_model_and_provider_labels_and_no_created_series(gateway, admin):
    """``taskgate_cost_usd_total`` carries what the task was charged; requests and tokens
    are labelled with a bounded model (the price table's family, else ``other``) and the
    configured provider; refusals have ``none``; no ``*_created`` series."""
    task, token = admin.create_task()
    client = _client(gateway, token)
    before = scrape(gateway.url)
    reply = client.chat.completions.create(model="gpt-4o-mini-2024-07-18", messages=USER)
    client.chat.completions.create(model="mock-model", messages=USER)
    r = httpx.post(gateway.url + CHAT, content=b"{not json", timeout=10, headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 400
    text = httpx.get(gateway.url + "/metrics").text
    after = scrape(gateway.url)
    delta = lambda name, **labels: sample(after, name, **labels) - sample(before, name, **labels)  # noqa: E731
    family = {"model": "gpt-4o-mini", "provider": "openai"}
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="forwarded", **family) == 1
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="forwarded", model="other",
                 provider="openai") == 1
    assert delta("taskgate_requests_total", endpoint=CHAT, outcome="invalid", model="none", provider="none") == 1
    assert delta("taskgate_tokens_total", direction="input", **family) == reply.usage.prompt_tokens
    deadline = time.monotonic() + 10  # the task's dollars settle after the last byte, apart from the answer
    while (cost := admin.task(task)["cost_usd"]) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cost > 0 and delta("taskgate_cost_usd_total", **family) == pytest.approx(cost, rel=1e-6)
    assert delta("taskgate_cost_usd_total", model="other") == 0  # mock-model has no price
    assert "_created" not in text, [line for line in text.splitlines() if "_created" in line][:3]


def test_model_labels_are_bounded():
    from app.config import GatewayConfig, environment_config

    metrics.configure(GatewayConfig.model_validate({
        "providers": {"local": {"kind": "openai", "base_url": "http://x/v1"},
                      "anthropic": {"kind": "anthropic", "base_url": "http://y"}},
        "models": [{"name": "coder", "provider": "local"}, {"name": "claude-*", "provider": "anthropic"},
                   {"name": "*", "provider": "local"}]}))
    try:
        assert metrics.model_label("coder") == "coder"
        assert metrics.model_label("gpt-4.1-mini-2025-04-14") == "gpt-4.1-mini"
        assert metrics.model_label("claude-unreleased-9") == "claude-*"
        assert metrics.model_label("x" * 300) == "other"
        assert metrics.model_label(None) == "none"
        assert metrics.provider_label("local") == "local" and metrics.provider_label("nope") == "other"
    finally:
        metrics.configure(environment_config("http://a/v1", None, "http://b", None))


def test_labels_stay_bounded():
    assert metrics.reason_label("my-own-reason-123") == "other"
    assert metrics.reason_label("repeated_tool_call") == "repeated_tool_call"
    assert metrics.endpoint_label("/v1/whatever/abc") == "other"


def test_token_protection_and_workers_share_one_exposition(database_url, upstream, admin):
    gw = GatewayProcess(database_url, upstream.base_url, TASKGATE_METRICS_TOKEN="mtok")
    gw.serve_args = ("--workers", "2")
    gw.start(timeout=120)  # two workers start slowly on a loaded machine
    try:
        assert httpx.get(gw.url + "/metrics").status_code == 401
        assert httpx.get(gw.url + "/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
        _, token = admin.create_task()
        n = 12
        for _ in range(n):
            # a new connection each time, so both workers get requests
            with openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0) as c:
                c.chat.completions.create(model="mock-model", messages=USER)
        for _ in range(4):  # whichever worker answers, it reports every worker's samples
            after = scrape(gw.url, token="mtok")
            assert sample(after, "taskgate_requests_total", endpoint=CHAT, outcome="forwarded") == n
    finally:
        gw.stop()
