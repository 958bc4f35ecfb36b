"""Agent frameworks as real clients (PyPI, pinned in the ``test`` extra, offline): LangGraph
on langchain-openai, Pydantic AI and litellm as a client library each drive the scripted
upstream through a real gateway. A run looping on one tool call is stopped by its 6th
request with a loop reason and gives up at the refusal (none of them retries the stop:
``refused_requests`` is 1; litellm raises BadRequestError, which agents built on it, such as
Aider, treat as final); a run whose calls differ every time is never stopped. (smolagents:
tests/test_text_actions_e2e.py.)"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm: no download at import

import json

import litellm
import openai
import pytest
from langchain_core.tools import tool as langchain_tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError, UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

PROMPT = "read README.md"
HEALTHY_REQUESTS = 16


def read_file(path: str) -> str:
    """Read a file.

    Args:
        path: the file's path
    """
    return f"contents of {path}"


def grep(pattern: str) -> str:
    """Search the repository.

    Args:
        pattern: what to look for
    """
    return f"src/app.py:1: {pattern}"


# ---------------------------------------------------------------- LangGraph / langchain-openai

def langgraph_run(gateway, token: str, requests: int) -> None:
    """Ends at its recursion limit with "Sorry, need more steps" (no exception)."""
    llm = ChatOpenAI(model="mock-model", base_url=gateway.url + "/v1", api_key=token)
    agent = create_react_agent(llm, [langchain_tool(read_file), langchain_tool(grep)])
    agent.invoke({"messages": [("user", PROMPT)]}, {"recursion_limit": 2 * requests})


# ---------------------------------------------------------------- Pydantic AI

def pydantic_ai_run(gateway, token: str, requests: int) -> None:
    model = OpenAIChatModel("mock-model", provider=OpenAIProvider(base_url=gateway.url + "/v1", api_key=token))
    agent = Agent(model, tools=[read_file, grep])
    try:
        agent.run_sync(PROMPT, usage_limits=UsageLimits(request_limit=requests))
    except UsageLimitExceeded:
        pass  # its own request limit


# ---------------------------------------------------------------- litellm as a client library

def litellm_run(gateway, token: str, requests: int) -> None:
    """A loop in the manner of the agents built on ``litellm.completion``."""
    tools = [{"type": "function", "function": {"name": f.__name__, "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in f.__annotations__ if p != "return"}}}}
        for f in (read_file, grep)]
    functions = {"read_file": read_file, "grep": grep}
    messages: list[dict] = [{"role": "user", "content": PROMPT}]
    for _ in range(requests):
        message = litellm.completion(model="openai/mock-model", api_base=gateway.url + "/v1", api_key=token,
                                     messages=messages, tools=tools).choices[0].message
        calls = message.tool_calls or []
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]})
        for c in calls:
            result = functions[c.function.name](**json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result})


#: family -> its run: (gateway, token, requests) -> None at its own request limit
FAMILIES = {"langgraph": langgraph_run, "pydantic_ai": pydantic_ai_run, "litellm": litellm_run}
#: family -> the exception a stopped run ends with
STOP_ERRORS: dict[str, type[Exception]] = {
    "langgraph": openai.BadRequestError,
    "pydantic_ai": ModelHTTPError,
    "litellm": litellm.BadRequestError,  # a 403 would be a generic APIError, retried by Aider
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_looping_run_is_stopped_by_its_6th_request(gateway, admin, upstream, family):
    task_id, token = admin.create_task()
    upstream.script("tool_call", name="read_file", arguments={"path": "README.md"})
    before = len(upstream.requests)
    with pytest.raises(STOP_ERRORS[family]) as exc:
        FAMILIES[family](gateway, token, requests=40)
    assert "is stopped (repeated_tool_call" in str(exc.value)
    task = admin.task(task_id)
    assert task["stop_reason"] == "repeated_tool_call" and task["stop_detail"]["tool_name"] == "read_file"
    assert len(upstream.requests) - before == 5 and task["refused_requests"] == 1  # no retry of the stop
    assert getattr(exc.value, "status_code", 400) == 400


@pytest.mark.parametrize("family", list(FAMILIES))
def test_healthy_run_with_different_calls_is_never_stopped(gateway, admin, upstream, family):
    task_id, token = admin.create_task()
    upstream.script("search", name="grep")  # a new pattern every request, a non-empty result
    FAMILIES[family](gateway, token, requests=HEALTHY_REQUESTS)
    task = admin.task(task_id)
    assert task["status"] == "active" and task["refused_requests"] == 0
    assert task["admitted_requests"] >= HEALTHY_REQUESTS - 1
