"""no_progress through a real gateway (issue 34 item 5): an agent that edits and re-runs
its check, getting byte-identical output every time, is noted in-band from the 8th
re-run on (a warning: the task goes on), counted in events and metrics; an operator can
make it latch. Tool calls and results as an agent sends them (chat completions)."""

from __future__ import annotations

import json

import httpx

from tests.console_support import sample, scrape

USER = [{"role": "user", "content": "make the failing test pass"}]
CHECK_OUTPUT = "FAILED tests/test_x.py::test_it - AssertionError: 1 != 2\n1 failed in 0.12s"


def call(n: int, name: str, arguments: dict) -> dict:
    return {"id": f"call_{n:04d}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def agent_turns(reruns: int) -> list[list[dict]]:
    """The histories of an agent that runs its check, then ``reruns`` times edits a
    file (a different edit each time) and runs the check again: one request per step."""
    steps = [("run", {"cmd": "pytest -x"}, CHECK_OUTPUT)]
    for i in range(reruns):
        steps += [("edit", {"path": "x.py", "line": i, "text": f"fix {i}"}, "ok"),
                  ("run", {"cmd": "pytest -x"}, CHECK_OUTPUT)]
    messages, histories = list(USER), []
    for n, (name, arguments, result) in enumerate(steps):
        c = call(n, name, arguments)
        messages = [*messages, {"role": "assistant", "content": None, "tool_calls": [c]},
                    {"role": "tool", "tool_call_id": c["id"], "content": result}]
        histories.append(messages)
    return histories


def notes(upstream) -> list[str]:  # type: ignore[no-untyped-def]
    return [m["content"] for m in upstream.requests[-1].json["messages"]
            if m["role"] == "system" and m["content"].startswith("[taskgate]")]


def test_re_running_a_check_with_the_same_output_after_edits_is_noted_not_stopped(gateway, admin, upstream):
    task_id, token = admin.create_task()
    before = scrape(gateway.url)
    headers = {"authorization": f"Bearer {token}"}
    noted_at = []
    for step, messages in enumerate(agent_turns(9)):
        r = httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=30,
                       json={"model": "mock-model", "messages": messages})
        assert r.status_code == 200, r.text
        if notes(upstream):
            noted_at.append(step)
            assert "you re-ran run with the same arguments" in notes(upstream)[0]
    assert noted_at == [16, 18]  # the 8th and 9th re-runs (steps 2, 4, ... 18 carry a check's result)
    assert admin.task(task_id)["status"] == "active"
    warning = admin.wait_for_event(task_id, "loop_warning")
    assert warning["reason"] == "no_progress" and warning["detail"]["count"] == 8
    assert "re-ran run" in warning["message"]
    after = scrape(gateway.url)
    assert sample(after, "taskgate_no_progress_signals_total") \
        - sample(before, "taskgate_no_progress_signals_total") == 2
    assert sample(after, "taskgate_loop_notes_total", rule="no_progress") \
        - sample(before, "taskgate_loop_notes_total", rule="no_progress") == 2


def test_an_operator_can_make_no_progress_stop_the_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"rule_actions": {"no_progress": "latch"}, "no_progress_reruns": 3})
    headers = {"authorization": f"Bearer {token}"}
    statuses = [httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=30,
                           json={"model": "mock-model", "messages": messages}).status_code
                for messages in agent_turns(3)]
    assert statuses == [200] * 6 + [400]  # the request carrying the 3rd identical re-run is refused
    task = admin.task(task_id)
    assert task["stop_reason"] == "no_progress" and task["stop_detail"]["count"] == 3


def test_with_strike_the_first_is_noted_and_the_second_stops(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"rule_actions": {"no_progress": "strike"}, "no_progress_reruns": 3})
    headers = {"authorization": f"Bearer {token}"}
    statuses = []
    for messages in agent_turns(4):
        statuses.append(httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=30,
                                   json={"model": "mock-model", "messages": messages}).status_code)
        if statuses[-1] == 200 and len(statuses) == 7:
            assert len(notes(upstream)) == 1  # the strike's note, in the request that drew it
    assert statuses == [200] * 8 + [400]
    task = admin.task(task_id)
    assert task["stop_reason"] == "no_progress" and task["stop_detail"]["strikes"] == 2 and task["strikes"] == 1
