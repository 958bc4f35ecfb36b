"""Loop guard, second generation, end to end: real gateway, scripted upstream, agents
on the official SDKs (helpers from test_loop_guard_e2e)."""

from __future__ import annotations

import itertools
import time

import openai
import pytest

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


def test_a_loop_guard_changed_mid_run_applies_to_the_next_request(gateway, admin, upstream):
    """The gateway fingerprints a request's results under the task's ``loop_guard`` as it
    last saw it, without a lookup; admission compares it with the locked row, so an
    operator's change applies to the next request (the default normalisers back on: the
    envelope no longer hides the loop)."""
    task_id, token = admin.create_task(loop_guard={"result_normalizer_defaults": False})
    upstream.script("tool_call", name="exec_command", arguments={"cmd": "ls -la"})
    step = responses_agent(gateway, token, stream=False, result=codex_result)
    for _ in range(6):
        step()
    assert admin.task(task_id)["status"] == "active"
    r = admin.http.patch(f"/admin/tasks/{task_id}", json={"loop_guard": {}})
    assert r.status_code == 200, r.text
    turns, _ = run_until_stopped(step)
    # the request right after the change is fingerprinted under it already (5 when the
    # gateway's stale configuration is kept for it)
    assert turns == 4
    assert admin.task(task_id)["stop_reason"] == "repeated_tool_call"


def test_operator_pattern_per_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"result_normalizers": [r"build #\d+"]})
    upstream.script("tool_call", name="ci_status")
    turns, _ = run_until_stopped(chat_agent(gateway, token, stream=False,
                                            result=lambda i: f"build #{100 + i}: pending"))
    assert turns == 5
    assert admin.task(task_id)["stop_detail"]["result_normalizers"][-1] == "operator:1"


def test_bad_operator_pattern_is_a_422(admin):
    r = admin.http.post("/admin/tasks", json={"loop_guard": {"result_normalizers": ["(unclosed"]}})
    assert r.status_code == 422 and "is refused" in r.text


def test_test_run_whose_pass_count_changes_is_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="bash", arguments={"command": "pytest -q"})
    step = chat_agent(gateway, token, stream=True,
                      result=lambda i: f"{i // 3} passed, {30 - i // 3} failed in 0.{i}1s")
    for _ in range(25):
        step()
    assert admin.task(task_id)["status"] == "active"


def text_agent(gateway, token: str, headers: dict[str, str] | None = None):
    """A chat client that keeps saying "continue" to a model that answers without tools."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0,
                           default_headers=headers or {})
    messages: list[dict] = [{"role": "user", "content": "summarise the repository"}]

    def step() -> str:
        answer = client.chat.completions.create(model="mock-model", messages=messages).choices[0].message.content
        messages.extend([{"role": "assistant", "content": answer}, {"role": "user", "content": "continue"}])
        return answer

    return step


def wait_for_stop(admin, task_id: str, timeout: float = 5) -> dict:
    deadline = time.monotonic() + timeout
    while (task := admin.task(task_id))["status"] != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    return task


# ------------------------------------------------------------ repeated_empty_result

def test_empty_searches_with_varied_arguments_are_stopped(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("search", name="grep")
    outputs = ["No matches found", "No files found", "0 results", "[]"]
    turns, exc = run_until_stopped(chat_agent(gateway, token, stream=True, result=lambda i: outputs[i % 4]))
    assert turns == 12
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_empty_result" and task["stop_detail"]["tool_name"] == "grep"
    assert "came back empty 12 times" in exc.message


# ------------------------------------------------------------ healthy shapes, 25+ turns

def test_edits_answering_file_updated_are_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("search", name="edit")  # different arguments every turn
    step = chat_agent(gateway, token, stream=True, result=lambda i: "File updated")
    for _ in range(30):
        step()
    assert admin.task(task_id)["status"] == "active"


def test_searches_that_sometimes_find_something_are_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("search", name="grep")
    step = chat_agent(gateway, token, stream=False,
                      result=lambda i: f"src/m{i}.py:1: needle" if i % 8 == 7 else "No matches found")
    for _ in range(30):
        step()
    assert admin.task(task_id)["status"] == "active"


def test_polling_under_its_per_tool_allowance_is_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"per_tool_thresholds": {"check_status": 30}})
    upstream.script("tool_call", name="check_status", arguments={"job": 7})
    step = chat_agent(gateway, token, stream=True, result=lambda i: "[]")
    for _ in range(28):
        step()
    assert admin.task(task_id)["status"] == "active"


TABLE = "| file | status |\n|---|---|\n" + "| src/app.py | unchanged since the last run |\n" * 40


def test_long_answers_repeating_table_rows_are_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    for turn in range(26):
        upstream.script("text", text=f"Turn {turn}:\n{TABLE}", chunks=30)
        with client.chat.completions.stream(model="mock-model", messages=[{"role": "user", "content": "status"}]) as s:
            assert s.get_final_completion().choices[0].message.content.startswith(f"Turn {turn}")
    assert admin.task(task_id)["status"] == "active"


# ------------------------------------------------------------ repeated_response

def test_the_same_answer_five_times_stops_the_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"rule_actions": {"repeated_response": "latch"}})
    upstream.script("text", text="I have finished the task.")
    step = text_agent(gateway, token)
    for _ in range(6):  # the answer to the opening question is not a repeat of anything yet
        step()
    task = wait_for_stop(admin, task_id)
    assert task["stop_reason"] == "repeated_response" and task["stop_detail"]["count"] == 5
    with pytest.raises(openai.BadRequestError) as exc:
        step()
    assert "same answer without tool calls 5 times" in exc.value.message


def test_the_same_one_shot_prompt_sent_many_times_is_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("text", text="The capital of France is Paris.")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    for _ in range(8):  # no history: each request is a new question, not a conversation going round
        client.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "capital?"}])
    assert wait_for_stop(admin, task_id, timeout=0.5)["status"] == "active"


def test_a_tool_call_between_answers_breaks_the_run(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("text", text="Still working on it.")
    step = text_agent(gateway, token)
    for _ in range(4):
        step()
    upstream.script("tool_call")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    client.chat.completions.create(model="mock-model",
                                   messages=[{"role": "user", "content": "summarise the repository"}])
    upstream.script("text", text="Still working on it.")
    for _ in range(4):
        step()
    assert wait_for_stop(admin, task_id, timeout=0.5)["status"] == "active"


# ------------------------------------------------------------ per-conversation ceilings

def test_conversation_request_limit_counts_each_conversation(gateway, admin, upstream):
    task_id, token = admin.create_task(conversation_request_limit=3)
    a = text_agent(gateway, token, {"x-taskgate-conversation": "pass-a"})
    b = text_agent(gateway, token, {"x-taskgate-conversation": "pass-b"})
    for agent in (a, a, b, b, a):
        upstream.script("text", text=f"answer {time.monotonic()}")
        agent()
    with pytest.raises(openai.BadRequestError) as exc:
        a()
    task = admin.task(task_id)
    assert task["stop_reason"] == "conversation_request_limit"
    assert task["stop_detail"]["conversation_key"].startswith("h:")
    assert "conversation_request_limit" in exc.value.message and task["admitted_requests"] == 5


def test_conversation_tool_call_limit(gateway, admin, upstream):
    task_id, token = admin.create_task(conversation_tool_call_limit=4)
    upstream.script("tool_call", parallel=2)
    step = chat_agent(gateway, token, stream=True, result=lambda i: f"result {i}")
    step()
    step()  # 4 calls: at the ceiling
    assert admin.task(task_id)["status"] == "active"
    step()  # 6 calls: over it, latched when the response ends
    task = wait_for_stop(admin, task_id)
    assert task["stop_reason"] == "conversation_tool_call_limit" and task["stop_detail"]["count"] == 6


def test_conversation_max_duration(gateway, admin, upstream):
    task_id, token = admin.create_task(conversation_max_duration_s=0.5)
    step = text_agent(gateway, token)
    step()
    time.sleep(0.7)
    with pytest.raises(openai.BadRequestError):
        step()
    assert admin.task(task_id)["stop_reason"] == "conversation_max_duration"


# ------------------------------------------------------------ x-taskgate-conversation

def test_operator_conversation_header_wins_over_the_session_header(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call")
    same = {"x-session-id": "one-session-for-both"}
    a = chat_agent(gateway, token, stream=False, headers={**same, "x-taskgate-conversation": "reviewer"})
    b = chat_agent(gateway, token, stream=False, headers={**same, "x-taskgate-conversation": "writer"})
    for _ in range(5):  # 4 identical completed calls in each conversation
        a()
        b()
    assert admin.task(task_id)["status"] == "active"
