"""The guard's work is bounded and off the event loop (issue 21, items 1 and 2), with
real gateway processes: a 24 MiB tool result on one task, or a catastrophic-backtracking
pattern of another task, leaves a third task's requests answered as before.

What is measured is the gateway's own event loop (``taskgate_event_loop_stall_seconds``,
:mod:`app.console.loop_lag`): no wake-up of its loop probe more than 100 ms late, less
the time its threads waited for a CPU meanwhile, while the large work runs. That
excludes the machine's load, so the bound holds at any load average; the client's p99
beside it (printed, and bounded loosely against a baseline of the same run) did not: it
failed at load average 10 and above, CPU contention rather than the loop."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pydantic
import pytest

from app.settings import Settings
from tests.latency_probe import Probe, upstream_process
from tests.support import Admin, GatewayProcess
from tests.test_loop_guard_e2e import TOOLS_CHAT, chat_agent, run_until_stopped

#: A tool result as a real agent reads a big log: timestamps, ids, elapsed times on
#: every line (the default normalisers' worst case), 24 MiB in all.
LOG_LINE = ("2026-12-01T06:54:12.345Z INFO req 123e4567-e89b-12d3-a456-426614174000 "
            "obj deadbeefcafe0123456789 took 1.23s at 06:54:12 [01/Dec/2026:06:54:12 +0000]\n")
BIG = LOG_LINE * (24 * 1024 * 1024 // len(LOG_LINE))


@pytest.fixture(scope="module")
def quiet_gateway(database_url):
    """A gateway whose upstream runs in its own process (tests/latency_probe.py)."""
    with upstream_process() as url, GatewayProcess(database_url, url) as gw:
        yield gw


def _loop_busy(gateway) -> tuple[int, int]:
    """The gateway's loop probe so far: (wake-ups, wake-ups stalled more than 100 ms),
    from ``/metrics``."""
    text = httpx.get(gateway.url + "/metrics", timeout=30).text
    values = {}
    for line in text.splitlines():
        if line.startswith("taskgate_event_loop_stall_seconds_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    count = int(values["taskgate_event_loop_stall_seconds_count"])
    return count, count - int(values['taskgate_event_loop_stall_seconds_bucket{le="0.1"}'])


def _p99(samples: list[float]) -> float:
    assert all(x >= 0 for x in samples), [x for x in samples if x < 0][:5]  # every probe answered 200
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _latencies(gateway, token: str, work: Callable[[], object] | None = None, minimum: int = 100) -> list[float]:
    """Latencies of another process's small requests for ``token`` while ``work`` runs
    (at least ``minimum``, and until the work is done)."""
    probe = Probe(gateway.url, token, minimum)
    try:
        if work is not None:
            work()
    finally:
        samples = probe.stop()
    return samples


def _tool_turn(gateway, token: str, result: str, call_id: str = "call_big") -> Callable[[], object]:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, timeout=120)
    messages = [{"role": "user", "content": "read the log"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": "read_file", "arguments": '{"path": "app.log"}'}}]},
                {"role": "tool", "tool_call_id": call_id, "content": result}]
    return lambda: client.chat.completions.create(model="mock-model", messages=messages, tools=TOOLS_CHAT)


def test_a_24_mib_tool_result_never_holds_the_event_loop_for_100_ms(quiet_gateway):
    gateway, admin = quiet_gateway, Admin(quiet_gateway.url)
    _, other = admin.create_task(request_limit=100_000)
    big_id, big = admin.create_task()
    baseline = _latencies(gateway, other)
    ticks, stalls = _loop_busy(gateway)
    during = _latencies(gateway, other, _tool_turn(gateway, big, BIG))
    ticks_after, stalls_after = _loop_busy(gateway)
    print(f"p99 baseline {_p99(baseline) * 1000:.1f} ms, during the 24 MiB result {_p99(during) * 1000:.1f} ms "
          f"({len(during)} probes); loop: {ticks_after - ticks} wake-ups, {stalls_after - stalls} stalled "
          f"more than 100 ms")
    assert ticks_after - ticks > 10  # the probe ran while the result was handled
    assert stalls_after - stalls == 0
    assert _p99(during) - _p99(baseline) < 1.0, sorted(during)[-5:]  # loose: the client side under load
    assert admin.task(big_id)["admitted_requests"] == 1


def test_identical_large_results_still_make_a_loop(gateway, admin, upstream):
    """The bound does not blind the guard: 1 MiB results identical but for their
    (masked) timestamps stop the task like small ones."""
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="read_file", arguments={"path": "app.log"})
    head = LOG_LINE * 8000  # ~1 MiB, past the 64 KiB scan bound
    turns, _ = run_until_stopped(chat_agent(gateway, token, stream=False,
                                            result=lambda i: f"read at 06:54:{i % 60:02d}\n" + head
                                            + f"done at 2026-12-01T06:55:{i % 60:02d}Z"))
    assert turns <= 15  # 5 when each result is recorded before the next request is judged
    assert admin.task(task_id)["stop_reason"] in ("repeated_tool_call", "tool_call_cycle")


@pytest.mark.parametrize("pattern", [r"(?=a)", r"(x)\1"])
def test_a_pattern_without_a_linear_time_match_is_refused(admin, pattern):
    r = admin.http.post("/admin/tasks", json={"loop_guard": {"result_normalizers": [pattern]}})
    assert r.status_code == 422 and "linear time" in r.text
    assert r.json()["error"]["param"] == "loop_guard.result_normalizers"


@pytest.mark.parametrize("field", ["result_normalizers", "error_patterns", "empty_result_patterns"])
def test_operator_settings_without_a_linear_time_match_are_a_start_up_error(field):
    with pytest.raises(pydantic.ValidationError, match="linear time"):
        Settings(**{field: ("ok", r"(?<=x)y")})


def test_catastrophic_backtracking_pattern_is_harmless(quiet_gateway):
    """``(a+)+$`` per task (accepted: RE2 has no backtracking); results built to make
    a backtracking engine take hours never hold the gateway's loop for 100 ms."""
    gateway, admin = quiet_gateway, Admin(quiet_gateway.url)
    _, other = admin.create_task(request_limit=100_000)
    evil_id, evil = admin.create_task(loop_guard={"result_normalizers": ["(a+)+$"], "cycle_repeats": 1000,
                                                  "identical_streak": 1000})  # the turns repeat on purpose
    baseline = _latencies(gateway, other)
    ticks, stalls = _loop_busy(gateway)

    def attack() -> None:  # for as long as the probes run
        for i in range(24):
            n = (26, 40, 200_000)[i % 3]
            # a new result each turn (the suffix after "!" keeps (a+)+$ from matching),
            # so no loop rule stops the attacker before the probes end
            _tool_turn(gateway, evil, "a" * n + f"!{i}", call_id=f"call_{i}")()
    during = _latencies(gateway, other, attack)
    ticks_after, stalls_after = _loop_busy(gateway)
    print(f"p99 baseline {_p99(baseline) * 1000:.1f} ms, during the (a+)+$ results {_p99(during) * 1000:.1f} ms "
          f"({len(during)} probes); loop: {ticks_after - ticks} wake-ups, {stalls_after - stalls} stalled "
          f"more than 100 ms")
    assert ticks_after - ticks > 10 and stalls_after - stalls == 0
    assert _p99(during) - _p99(baseline) < 1.0, sorted(during)[-5:]  # loose: the client side under load
    assert admin.task(evil_id)["admitted_requests"] == 24
    assert httpx.get(gateway.url + "/healthz", timeout=5).status_code == 200
