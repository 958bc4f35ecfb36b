"""Loop guard, second generation, end to end: real gateway, scripted upstream, agents
on the official SDKs (helpers from test_loop_guard_e2e)."""

from __future__ import annotations

import itertools

from tests.test_loop_guard_e2e import chat_agent, responses_agent, run_until_stopped
from tests.test_normalize import LISTING, codex_envelope

_chunk_ids = itertools.count(0x95330B)


def codex_result(turn: int) -> str:
    """``ls -la`` as Codex CLI returns it: the same listing in a fresh envelope each time."""
    return codex_envelope(LISTING, chunk=f"{next(_chunk_ids):06x}", wall=f"{0.0001 * (turn + 1):.4f}")


def test_codex_shaped_shell_loop_is_stopped_by_the_identical_rule(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="exec_command", arguments={"cmd": "ls -la"})
    turns, exc = run_until_stopped(responses_agent(gateway, token, stream=True, result=codex_result))
    assert turns == 5  # the 6th request carries the 5th identical (normalised) result
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_call"
    assert "codex_shell_envelope" in task["stop_detail"]["result_normalizers"]
    assert "masking volatile parts" in exc.message


def test_without_the_default_normalisers_the_envelope_hides_the_loop(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"result_normalizer_defaults": False})
    upstream.script("tool_call", name="exec_command", arguments={"cmd": "ls -la"})
    step = responses_agent(gateway, token, stream=False, result=codex_result)
    for _ in range(8):
        step()
    assert admin.task(task_id)["status"] == "active"


def test_operator_pattern_per_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"result_normalizers": [r"build #\d+"]})
    upstream.script("tool_call", name="ci_status")
    turns, _ = run_until_stopped(chat_agent(gateway, token, stream=False,
                                            result=lambda i: f"build #{100 + i}: pending"))
    assert turns == 5
    assert admin.task(task_id)["stop_detail"]["result_normalizers"][-1] == "operator:1"


def test_bad_operator_pattern_is_a_422(admin):
    r = admin.http.post("/admin/tasks", json={"loop_guard": {"result_normalizers": ["(unclosed"]}})
    assert r.status_code == 422 and "not a valid regex" in r.text


def test_test_run_whose_pass_count_changes_is_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="bash", arguments={"command": "pytest -q"})
    step = chat_agent(gateway, token, stream=True,
                      result=lambda i: f"{i // 3} passed, {30 - i // 3} failed in 0.{i}1s")
    for _ in range(25):
        step()
    assert admin.task(task_id)["status"] == "active"
