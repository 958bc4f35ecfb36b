"""Hostile agent-written text through a real gateway (issue 41): requests whose text once
froze the whole process (a fence of 8,000 spaces: 274 s in Python's ``re``; ``Action`` and
60,000 spaces in the first user message: 7 s) are answered in seconds, and while they are
in flight another task's request and ``/healthz`` answer within a second."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

HOSTILE = {
    "fence_of_spaces": [{"role": "user", "content": "Read a."},
                        {"role": "assistant", "content": "Action:\n```" + " " * 8_000 + "x"},
                        {"role": "user", "content": "Observation: ok"}],
    "action_then_spaces_in_the_seed": [{"role": "user", "content": "Action" + " " * 60_000}],
    "scratchpad_of_tabs_and_digits": [{"role": "system", "content": "Thought: " + "\t1 " * 40_000},
                                      {"role": "user", "content": "Action 1" + " \t7" * 40_000 + "\nObservation"}],
}
#: Hostile requests sent at once, so that they overlap the probes.
AT_ONCE = 4


def _post(url: str, token: str, messages: list[dict]) -> tuple[int, float]:
    start = time.monotonic()
    response = httpx.post(url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                          json={"model": "mock-model", "messages": messages}, timeout=60)
    return response.status_code, time.monotonic() - start


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_neither_freezes_the_gateway_nor_fails(gateway, admin, name):
    _, hostile_token = admin.create_task(request_limit=100)
    _, probe_token = admin.create_task(request_limit=100)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        hostile = [pool.submit(_post, gateway.url, hostile_token, HOSTILE[name]) for _ in range(AT_ONCE)]
        start = time.monotonic()
        health = httpx.get(gateway.url + "/healthz", timeout=30)
        health_s = time.monotonic() - start
        probe_status, probe_s = _post(gateway.url, probe_token, [{"role": "user", "content": "hi"}])
        answers = [f.result(timeout=60) for f in hostile]
    assert health.status_code == 200 and health_s < 1.0, health_s
    assert probe_status == 200 and probe_s < 1.0, probe_s
    for status, seconds in answers:
        assert status < 500 and seconds < 5.0, (status, seconds)
