"""Loop guard end to end: small agents on the official SDKs execute the tool calls a
scripted upstream keeps asking for, through a real gateway, until the latch trips."""

from __future__ import annotations

import json
import time
from typing import Callable

import anthropic
import openai
import pytest

TOOLS_CHAT = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
TOOLS_RESPONSES = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
TOOLS_ANTHROPIC = [{"name": "read_file", "input_schema": {"type": "object"}}]


def chat_agent(gateway, token: str, stream: bool, result: Callable[[int], str] = lambda i: "same text",
               session: str | None = None, system: str = "You are a coding agent.",
               headers: dict[str, str] | None = None):
    """One turn per call: send the conversation, execute the tool calls, append results."""
    headers = {**({"x-session-id": session} if session else {}), **(headers or {})}
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, default_headers=headers)
    messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": "list the files"}]
    turn = 0

    def step() -> None:
        nonlocal turn
        if stream:
            with client.chat.completions.stream(model="mock-model", messages=messages, tools=TOOLS_CHAT) as s:
                message = s.get_final_completion().choices[0].message
        else:
            message = client.chat.completions.create(model="mock-model", messages=messages,
                                                     tools=TOOLS_CHAT).choices[0].message
        calls = message.tool_calls or []
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]})
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result(turn)})
        turn += 1

    step.messages = messages  # type: ignore[attr-defined]
    return step


def responses_agent(gateway, token: str, stream: bool, result: Callable[[int], str] = lambda i: "same text"):
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    items: list = [{"role": "user", "content": "list the files"}]
    turn = 0

    def step() -> None:
        nonlocal turn
        if stream:
            with client.responses.stream(model="mock-model", input=items, tools=TOOLS_RESPONSES,
                                         instructions="You are a coding agent.") as s:
                response = s.get_final_response()
        else:
            response = client.responses.create(model="mock-model", input=items, tools=TOOLS_RESPONSES,
                                               instructions="You are a coding agent.")
        for item in response.output:
            if item.type == "function_call":
                items.append({"type": "function_call", "call_id": item.call_id, "name": item.name,
                              "arguments": item.arguments})
                items.append({"type": "function_call_output", "call_id": item.call_id, "output": result(turn)})
        turn += 1

    return step


def anthropic_agent(gateway, token: str, stream: bool, result: Callable[[int], str] = lambda i: "same text",
                    is_error: bool = False):
    client = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "list the files"}]
    turn = 0

    def step() -> None:
        nonlocal turn
        kw = dict(model="mock-model", max_tokens=100, system="You are a coding agent.", messages=messages,
                  tools=TOOLS_ANTHROPIC)
        if stream:
            with client.messages.stream(**kw) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**kw)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": result(turn), "is_error": is_error}
                   for b in message.content if b.type == "tool_use"]
        messages.append({"role": "user", "content": results})
        turn += 1

    return step


STOPPED = (openai.BadRequestError, anthropic.ConflictError)


def run_until_stopped(step: Callable[[], None], max_turns: int = 40) -> tuple[int, Exception]:
    """Run turns until the gateway refuses one; returns (turns completed, the error)."""
    for turn in range(max_turns):
        try:
            step()
        except STOPPED as exc:
            return turn, exc
    raise AssertionError(f"not stopped within {max_turns} turns")


AGENTS = {
    "chat": chat_agent,
    "responses": responses_agent,
    "anthropic": anthropic_agent,
}


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize("wire", list(AGENTS))
def test_identical_tool_call_loop_is_stopped(gateway, admin, upstream, wire, stream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="read_file", arguments={"path": "README.md"})
    turns, exc = run_until_stopped(AGENTS[wire](gateway, token, stream))
    # 5 identical completed calls: the request carrying the 5th result never goes upstream
    assert turns == 5
    posts = [r for r in upstream.requests if r.method == "POST"]
    assert len(posts) == 5
    body = exc.body
    assert "repeated_tool_call" in json.dumps(body)
    task = admin.task(task_id)
    assert task["status"] == "stopped" and task["stop_reason"] == "repeated_tool_call"
    detail = task["stop_detail"]
    assert detail["tool_name"] == "read_file" and detail["count"] == 5
    assert detail["thresholds"]["identical_streak"] == 5
    assert len(detail["arguments_hash"]) == 64 and len(detail["result_hash"]) == 64


def test_claude_code_reminders_in_results_do_not_hide_a_loop(gateway, admin, upstream):
    """Claude Code 2.x appends a context reminder with a new number to every tool result
    (seen running it through the gateway: 822 identical Read calls, never stopped)."""
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="Read", arguments={"file_path": "/repo/README.md"})
    reminder = "1\thello\n\n<system-reminder>\n<total_tokens>{} tokens left</total_tokens>\n</system-reminder>"
    step = anthropic_agent(gateway, token, stream=True, result=lambda i: reminder.format(14_894_599 - 94 * i))
    turns, _ = run_until_stopped(step)
    assert turns == 5 and admin.task(task_id)["stop_reason"] == "repeated_tool_call"


def test_changing_results_are_not_a_loop(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="check_status")
    step = chat_agent(gateway, token, stream=True, result=lambda i: f"progress {i * 10}%")
    for _ in range(12):
        step()
    assert admin.task(task_id)["status"] == "active"


def test_sub_agent_conversations_are_judged_separately(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call")
    a = chat_agent(gateway, token, stream=False, session="sub-agent-a")
    b = chat_agent(gateway, token, stream=False, session="sub-agent-b")
    for _ in range(5):  # 4 completed identical calls in each conversation, 8 on the task
        a()
        b()
    assert admin.task(task_id)["status"] == "active"
    with pytest.raises(openai.BadRequestError):
        a()
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_call"
    assert task["stop_detail"]["conversation_key"].startswith("h:")


def test_conversations_without_session_header_keyed_by_first_messages(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call")
    a = chat_agent(gateway, token, stream=False, system="agent one")
    b = chat_agent(gateway, token, stream=False, system="agent two")
    for _ in range(5):
        a()
        b()
    assert admin.task(task_id)["status"] == "active"
    with pytest.raises(openai.BadRequestError):
        b()


def test_cycle_is_stopped(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_cycle", calls=[{"name": "read_file", "arguments": {"path": "a"}},
                                         {"name": "list_dir", "arguments": {"path": "."}}])
    turns, exc = run_until_stopped(chat_agent(gateway, token, stream=True))
    assert turns == 10
    assert admin.task(task_id)["stop_reason"] == "tool_call_cycle"


def test_failure_streak_with_changing_error_text(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="bash", arguments={"command": "cat /root/secret"})
    step = anthropic_agent(gateway, token, stream=True, result=lambda i: f"denied #{i}", is_error=True)
    turns, exc = run_until_stopped(step)
    assert turns == 12
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_failure"
    assert task["stop_detail"]["tool_name"] == "bash"


def test_permission_denied_without_error_flag_is_a_failure(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="bash", arguments={"command": "ls /root"})
    step = chat_agent(gateway, token, stream=False,
                      result=lambda i: f"ls: cannot open directory '/root/{i}': Permission denied")
    turns, _ = run_until_stopped(step)
    assert turns == 12
    assert admin.task(task_id)["stop_reason"] == "repeated_tool_failure"


def test_per_tool_threshold_and_task_overrides(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"per_tool_thresholds": {"check_status": 8}})
    upstream.script("tool_call", name="check_status")
    turns, _ = run_until_stopped(chat_agent(gateway, token, stream=False))
    assert turns == 8
    assert admin.task(task_id)["stop_detail"]["threshold"] == 8


def test_tool_call_ceiling(gateway, admin, upstream):
    task_id, token = admin.create_task(tool_call_limit=3)
    upstream.script("tool_call", parallel=2)
    step = chat_agent(gateway, token, stream=False, result=lambda i: f"result {i}")
    step()  # 2 calls
    step()  # 4 calls > 3: latched when the response finishes
    deadline = time.monotonic() + 5
    while admin.task(task_id)["status"] != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    task = admin.task(task_id)
    assert task["stop_reason"] == "tool_call_limit" and task["tool_calls"] == 4
    with pytest.raises(openai.BadRequestError):
        step()


def test_warning_before_the_stop_reaches_upstream_only(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"loop_warning": True})
    upstream.script("tool_call")
    step = chat_agent(gateway, token, stream=False)
    for _ in range(3):
        step()
    client_sent = json.loads(json.dumps(step.messages))  # what the client sends on turn 4
    step()
    posts = [r for r in upstream.requests if r.method == "POST"]
    forwarded = posts[3].json
    notice = forwarded["messages"][-1]
    assert notice["role"] == "system"
    assert "taskgate" in notice["content"] and "3 times" in notice["content"]
    # the rest of the request is exactly what the client sent
    assert forwarded["messages"][:-1] == client_sent
    assert forwarded["tools"] == TOOLS_CHAT and forwarded["model"] == "mock-model"
    assert all("taskgate" not in json.dumps(m) for m in posts[2].json["messages"])
    assert [e["kind"] for e in admin.events(task_id)].count("loop_warning") == 1
    turns, _ = run_until_stopped(step)
    assert turns == 1  # the 5th identical result still stops the task


def test_no_warning_when_disabled(gateway, admin, upstream):
    _, token = admin.create_task()
    upstream.script("tool_call")
    step = chat_agent(gateway, token, stream=False)
    for _ in range(4):
        step()
    assert all("[taskgate]" not in r.body.decode() for r in upstream.requests)


def test_ledger_shows_hashes_not_content(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="read_file", arguments={"path": "/etc/very-secret-path"})
    step = chat_agent(gateway, token, stream=False, result=lambda i: "TOP-SECRET-RESULT")
    for _ in range(3):
        step()
    deadline = time.monotonic() + 5  # the last response's call is recorded just after the client has it
    while len((r := admin.http.get(f"/admin/tasks/{task_id}/tool-calls")).json()["data"]) < 3 \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    assert r.status_code == 200
    text = r.text
    assert "very-secret-path" not in text and "TOP-SECRET-RESULT" not in text
    data = r.json()
    assert len(data["data"]) == 3
    assert {c["tool_name"] for c in data["data"]} == {"read_file"}
    assert len({c["arguments_hash"] for c in data["data"]}) == 1
    (conv,) = data["conversations"]
    assert conv["tool_calls"] == 3 and conv["verdict"] == "ok"
