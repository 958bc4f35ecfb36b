"""Tool use written as text, end to end: a ReAct prompt agent on the openai SDK and
smolagents' agents (the real package) drive the scripted upstream's ``text_tool`` answers
through a real gateway. A loop on one tool is stopped by the 6th request; varied calls are
never stopped."""

from __future__ import annotations

import json
import random
import re
import string

import openai
import pytest
from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

from tests.test_loop_guard_e2e import run_until_stopped

SYSTEM = "Answer with Thought:, Action:, Action Input: lines; you will get an Observation."


def react_agent(gateway, token: str, result=lambda args: "alpha\nbeta", scratchpad: bool = False):
    """A hand-written ReAct loop: the model's text names a tool, the agent runs it and sends
    the result back as text (an ``Observation:`` user turn, or appended to one prompt)."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    messages: list[dict] = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": "Question: what is in a?"}]

    def step() -> None:
        answer = client.chat.completions.create(model="mock-model", messages=messages,
                                                stop=["\nObservation:"]).choices[0].message.content
        action_input = re.search(r"Action Input: (.*)", answer)
        observation = result(json.loads(action_input.group(1)) if action_input else None)
        if scratchpad:  # LangChain's classic layout: one prompt that grows
            messages[-1]["content"] += f"\n{answer}\nObservation: {observation}\n"
        else:
            messages.extend([{"role": "assistant", "content": answer},
                             {"role": "user", "content": f"Observation: {observation}"}])

    return step


@pytest.mark.parametrize("scratchpad", [False, True], ids=["turns", "scratchpad"])
def test_react_loop_is_stopped(gateway, admin, upstream, scratchpad):
    task_id, token = admin.create_task()
    upstream.script("text_tool", convention="react")
    turns, exc = run_until_stopped(react_agent(gateway, token, scratchpad=scratchpad))
    assert turns == 5  # the 6th request carries the 5th identical action and observation
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_call" and task["stop_detail"]["tool_name"] == "text:read_file"
    assert "called text:read_file 5 times" in exc.message


def test_react_run_with_varied_calls_is_not_stopped(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("text_tool", convention="react", vary=True)
    step = react_agent(gateway, token, result=lambda args: f"contents of {args['path']}")
    for _ in range(25):
        step()
    assert admin.task(task_id)["status"] == "active"


def test_each_text_action_is_counted_once(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"identical_streak": 50})
    upstream.script("text_tool", convention="react")
    step = react_agent(gateway, token)
    for _ in range(8):  # every request resends the history; the first one carries no action
        step()
    assert admin.task(task_id)["tool_calls"] == 7


# ---------------------------------------------------------------- smolagents

@tool
def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file's path
    """
    return f"contents of {path}"


def smolagents_run(gateway, token: str, agent_class, max_steps: int = 20):
    model = OpenAIServerModel(model_id="mock-model", api_base=gateway.url + "/v1", api_key=token)
    agent = agent_class(tools=[read_file], model=model, max_steps=max_steps, verbosity_level=0)
    try:
        return agent.run("read README.md"), None
    except Exception as exc:  # noqa: BLE001 - returned: smolagents wraps the refusal in AgentGenerationError
        return None, exc


def smolagents_task(admin) -> tuple[str, str]:
    """A task whose id holds no digits: smolagents retries (with backoff) any error whose
    text contains "429", its test for a rate limit, and a generated id can hold one
    (``task_760f803429f67d22`` did: the stop was retried until the test timed out)."""
    return admin.create_task(id="smolagents-" + "".join(random.choices(string.ascii_lowercase, k=12)))


SMOLAGENTS = {
    "tool_calling_structured": (ToolCallingAgent, "tool_call", {}, "read_file"),
    "tool_calling_text": (ToolCallingAgent, "text_tool", {"convention": "json"}, "read_file"),  # uuid ids
    "code_agent": (CodeAgent, "text_tool", {"convention": "code"}, "text:python_interpreter"),
}


@pytest.mark.parametrize("kind", list(SMOLAGENTS))
def test_smolagents_loop_is_stopped_by_the_6th_request(gateway, admin, upstream, kind):
    agent_class, scenario, params, tool_name = SMOLAGENTS[kind]
    task_id, token = smolagents_task(admin)
    upstream.script(scenario, **params)
    before = len(upstream.requests)
    _, exc = smolagents_run(gateway, token, agent_class)
    assert exc is not None and "is stopped (repeated_tool_call" in str(exc)
    assert len(upstream.requests) - before == 5  # the 6th request was refused, nothing after it
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_call" and task["stop_detail"]["tool_name"] == tool_name
    assert task["refused_requests"] == 1


@pytest.mark.parametrize("agent_class", [ToolCallingAgent, CodeAgent], ids=["tool_calling", "code_agent"])
def test_smolagents_healthy_run_is_not_stopped(gateway, admin, upstream, agent_class):
    task_id, token = smolagents_task(admin)
    convention = "code" if agent_class is CodeAgent else "json"
    upstream.script("text_tool", convention=convention, vary=True, final_after=15)
    answer, exc = smolagents_run(gateway, token, agent_class)
    assert exc is None and answer == "done"
    assert admin.task(task_id)["status"] == "active"
