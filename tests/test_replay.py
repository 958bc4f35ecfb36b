"""Replay suite: provider streams through a real gateway, byte for byte.

Each fixture in ``tests/fixtures/replay/`` is a stream written for this suite (own
values) in the event sequence a provider documents: OpenAI chat completions, the
Responses API, an OpenRouter-style Responses stream, Anthropic Messages. The loopback
upstream (:mod:`tests.replay_upstream`) serves it once with one write per SSE event
and again split at byte offsets hypothesis chooses; a real gateway process relays it
to the official SDK. Every replay checks:

1. bytes relayed = bytes sent (recorded under the SDK, at the HTTP layer);
2. the official SDK (``openai`` / ``anthropic``) reads the same events, or raises the
   same error, through the gateway as directly from the upstream;
3. the ledger's tool calls (admin API ``/admin/tasks/{id}/tool-calls``: call id, tool
   name, arguments hash) are the client tool calls whose block completed;
4. the task's tokens are the stream's usage (see :data:`CASES` for how each counts);
5. no ``stream_stalled`` / ``stream_truncated`` event for a stream that ended by itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import anthropic
import httpx2
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.guard.fingerprint import arguments_hash
from tests.replay_upstream import ReplayUpstream
from tests.support import Admin, GatewayProcess
from tests.wire_support import cut_points

FIXTURES = Path(__file__).parent / "fixtures" / "replay"


@dataclass(frozen=True)
class Case:
    """What one fixture must leave behind: ``wire`` (chat, responses, anthropic), the
    ledger's tool calls as (call id, tool name, arguments), the task's input and
    output tokens."""

    wire: str
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0


CASES: dict[str, Case] = {
    # prompt_tokens already includes prompt_tokens_details.cached_tokens (1920): not added again
    "chat_parallel_tool_calls": Case("chat", [
        ("call_u7XyP2mQk9RbA4sLw0ZcJe1N", "get_forecast", {"city": "Trondheim", "days": 3}),
        ("call_H3dKf8VnL2pQ6tYw9mBx0SaR", "get_local_time", {"tz": "Europe/Oslo"})], 2317, 61),
    "chat_n3_choices": Case("chat", [
        ("call_Zq0wE4rT7yU1iO5pA8sD2fGh", "ferry_timetable", {"route": "Halhjem-Sandvikvåg", "after": "14:00"})],
        143, 58),
    # call 1 was half-sent when the provider's error chunk came: only call 0 counts
    "chat_error_mid_tool_call": Case("chat", [
        ("call_Wn5rT8yB2kL6pM1qX4vC9zDs", "list_dir", {"path": "src/"})]),
    # input_tokens includes input_tokens_details.cached_tokens; reasoning is in output_tokens
    "responses_reasoning_function_call": Case("responses", [
        ("call_Lm4nB7vC0xZ3aS6dF9gH2jKq", "grep_repo", {"pattern": "test_refund_rounding", "path": "tests/"})],
        4210, 188),
    "responses_custom_tool_call": Case("responses", [
        ("call_Qx8cV2bN5mA1sD4fG7hJ0kLp", "apply_patch",
         "*** Begin Patch\n*** Update File: app/refund.py\n@@ def refund(amount):\n"
         "-    return round(amount, 1)\n+    return round(amount, 2)\n*** End Patch")], 6020, 254),
    # web_search_call and mcp_call run at the provider: not client tool calls
    "responses_hosted_tools": Case("responses", [], 9150, 77),
    "responses_openrouter_done": Case("responses", [
        ("call_Ee3rR6tT9yY2uU5iI8oO1pPa", "run_tests", {"selector": "tests/test_refund.py"})], 733, 29),
    "responses_error_then_failed": Case("responses"),
    "anthropic_tool_use": Case("anthropic", [
        ("toolu_01Bx4Nc7Vd0Fe3Gh6Jk9Lm2P", "read_file", {"path": "tests/test_refund.py", "limit": 200})], 1342, 74),
    "anthropic_thinking_redacted": Case("anthropic", [
        ("toolu_01Qw2Er5Ty8Ui1Op4As7Df0G", "grep", {"pattern": "def refund", "path": "app/"})], 2810, 212),
    "anthropic_padded_pings": Case("anthropic", [
        ("toolu_01Lk8Jh5Gf2Ds9Aq6Zw3Xe0R", "echo", {"msg": "hi"})], 95, 31),
    # server_tool_use is the provider's; message_delta's cumulative usage wins over message_start
    "anthropic_server_tool_use": Case("anthropic", [], 7310, 163),
    # the compaction step is only in usage.iterations: 240 + 61,310 cache read + 212; 97 + 14
    "anthropic_compaction": Case("anthropic", [], 61762, 111),
    # input = input_tokens + cache_creation_input_tokens + cache_read_input_tokens
    "anthropic_cache_tokens": Case("anthropic", [], 18 + 1536 + 11264, 42),
    "anthropic_no_final_blank_line": Case("anthropic", [], 57, 9),
    # the second tool_use block never stopped before the error event: only the first counts
    "anthropic_error_mid_tool_use": Case("anthropic", [
        ("toolu_01Aa2Bb3Cc4Dd5Ee6Ff7Gg8H", "read_file", {"path": "README.md"})], 880, 1),
}


def test_every_fixture_has_a_case() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.sse")) == sorted(CASES)


@pytest.fixture(scope="module")
def replay_upstream() -> Iterator[ReplayUpstream]:
    with ReplayUpstream(FIXTURES) as server:
        yield server


@pytest.fixture(scope="module")
def replay_gateway(database_url: str, replay_upstream: ReplayUpstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, replay_upstream.base_url, TASKGATE_STREAM_CLOSE_GRACE_S="3") as gw:
        yield gw


class Recorder(httpx2.BaseTransport):
    """An HTTP transport that keeps every response body byte the gateway sends, including
    those after the SDK stopped reading (the SDKs are built on ``httpx2``)."""

    def __init__(self) -> None:
        self.inner = httpx2.HTTPTransport()
        self.body = bytearray()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self.inner.handle_request(request)
        return httpx2.Response(response.status_code, headers=response.headers,
                              stream=_Tee(response.stream, self.body), extensions=response.extensions)


class _Tee(httpx2.SyncByteStream):
    def __init__(self, stream: Any, into: bytearray) -> None:
        self.stream, self.into, self.finished = stream, into, False

    def __iter__(self) -> Iterator[bytes]:
        for part in self.stream:
            self.into += part
            yield part
        self.finished = True

    def close(self) -> None:  # an SDK that raised stops reading: keep what the gateway still sends
        if not self.finished:
            for part in self.stream:
                self.into += part
        self.stream.close()


def sdk_read(wire: str, base_url: str, api_key: str, headers: dict[str, str],
             transport: httpx2.BaseTransport | None = None) -> tuple[list[Any], str | None]:
    """Stream one request with the official SDK; return the events it yielded (as
    dicts) and the error it raised (type and message), if any."""
    http = httpx2.Client(transport=transport, timeout=20)
    events: list[Any] = []
    try:
        if wire == "anthropic":
            client: Any = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, http_client=http)
            stream = client.beta.messages.create(model="claude-replay", max_tokens=256, stream=True,
                                                 messages=[{"role": "user", "content": "go"}],
                                                 extra_headers=headers)
        else:
            client = openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, http_client=http)
            if wire == "chat":
                stream = client.chat.completions.create(
                    model="gpt-replay", messages=[{"role": "user", "content": "go"}], stream=True, n=3,
                    stream_options={"include_usage": True}, extra_headers=headers)
            else:
                stream = client.responses.create(model="gpt-replay", input="go", stream=True, extra_headers=headers)
        for event in stream:
            events.append(event.model_dump())
    except (openai.APIError, anthropic.APIError) as exc:
        return events, f"{type(exc).__name__}: {exc}"
    finally:
        http.close()
    return events, None


def settle(admin: Admin, task_id: str, case: Case) -> tuple[dict, list[dict]]:
    """The task and its ledger once accounting has caught up (what is expected shows
    up, then a short quiet period for anything unexpected)."""
    want = sorted((c, n, arguments_hash(a)) for c, n, a in case.calls)
    deadline = time.monotonic() + 10
    while True:
        task = admin.task(task_id)
        calls = admin.http.get(f"/admin/tasks/{task_id}/tool-calls").json()["data"]
        got = sorted((c["call_id"], c["tool_name"], c["arguments_hash"]) for c in calls)
        if (task["input_tokens"], task["output_tokens"], got) == (case.input_tokens, case.output_tokens, want):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    time.sleep(0.15)
    return admin.task(task_id), admin.http.get(f"/admin/tasks/{task_id}/tool-calls").json()["data"]


def replay(gateway: GatewayProcess, upstream: ReplayUpstream, admin: Admin, name: str, plan: str) -> None:
    """One replay of fixture ``name`` with write plan ``plan`` and the five checks."""
    case = CASES[name]
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    headers = {"x-replay-fixture": f"{name}.sse", "x-replay-cuts": plan}
    task_id, token = admin.create_task()
    recorder = Recorder()
    through = sdk_read(case.wire, gateway.url, token, headers, recorder)
    direct = sdk_read(case.wire, upstream.base_url, "sk-direct", headers)
    # 1. byte for byte
    assert bytes(recorder.body) == raw, (len(recorder.body), len(raw), bytes(recorder.body[-200:]))
    # 2. the SDK reads the same
    assert through == direct
    task, calls = settle(admin, task_id, case)
    # 3. the ledger holds the completed client tool calls
    assert sorted((c["call_id"], c["tool_name"], c["arguments_hash"]) for c in calls) == \
        sorted((c, n, arguments_hash(a)) for c, n, a in case.calls)
    assert all(c["result_hash"] is None for c in calls)
    # 4. tokens
    assert (task["input_tokens"], task["output_tokens"]) == (case.input_tokens, case.output_tokens)
    # 5. a stream that ended by itself was neither stalled nor truncated
    kinds = {e["kind"] for e in admin.events(task_id)}
    assert not kinds & {"stream_stalled", "stream_truncated"}, kinds
    assert task["stalls"] == 0 and task["admitted_requests"] == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_one_write_per_event(replay_gateway, replay_upstream, name):
    replay(replay_gateway, replay_upstream, Admin(replay_gateway.url), name, "events")


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=3, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_replay_split_at_any_byte(replay_gateway, replay_upstream, name, data):
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    cuts = data.draw(cut_points(raw), label="cuts")
    replay(replay_gateway, replay_upstream, Admin(replay_gateway.url), name, ",".join(map(str, cuts)) or "0")


@pytest.mark.parametrize(("name", "path", "sent"), [
    ("responses_openrouter_done", "/v1/responses", 8),  # half of the trailing data: [DONE]
    ("chat_error_mid_tool_call", "/v1/chat/completions", 0),  # the error chunk, then silence
])
def test_upstream_open_after_its_terminal_event_is_closed_after_the_grace_period(
        replay_gateway, replay_upstream, name, path, sent):
    """Upstream's terminal event (or its own error chunk) arrives, then upstream neither
    sends more nor closes: the gateway ends the stream itself after
    ``stream_close_grace_s`` (3 s here), with whole events only and nothing appended,
    and the stream counts as complete (no stall, no truncation)."""
    admin = Admin(replay_gateway.url)
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    whole = raw.index(b"data: [DONE]")
    task_id, token = admin.create_task()
    headers = {"authorization": f"Bearer {token}", "x-replay-fixture": f"{name}.sse",
               "x-replay-stop-at": str(whole + sent), "x-replay-linger-s": "60"}
    started = time.monotonic()
    with httpx2.stream("POST", replay_gateway.url + path, headers=headers, timeout=30,
                       json={"model": "gpt-replay", "input": "go", "messages": [], "stream": True}) as r:
        body = b"".join(r.iter_raw())
    elapsed = time.monotonic() - started
    assert body == raw[:whole]  # never half an event, nothing appended
    assert 3.0 <= elapsed < 20  # waited the grace period, then closed without upstream
    case = CASES[name]
    task, calls = settle(admin, task_id, case)
    assert (task["input_tokens"], task["output_tokens"]) == (case.input_tokens, case.output_tokens)
    assert [c["call_id"] for c in calls] == [c for c, _, _ in case.calls]
    assert not {e["kind"] for e in admin.events(task_id)} & {"stream_stalled", "stream_truncated"}
