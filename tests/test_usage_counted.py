"""Usage always counted (issue 19 §3): every streamed chat completion is asked for usage
and the usage-only chunk is hidden from a client that did not ask; with
TASKGATE_STREAM_USAGE=false such a stream is relayed untouched and its tokens are unknown."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest
from click.testing import CliRunner

from app.cli import main
from app.testing.upstream import UpstreamServer
from tests.support import ADMIN_TOKEN, Admin, GatewayProcess, fresh_database

MODEL = "gpt-4.1-mini"


def _stream(url: str, token: str) -> list:
    oa = openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0)
    return list(oa.chat.completions.create(model=MODEL, stream=True, messages=[{"role": "user", "content": "hi"}]))


def _task(admin: Admin, task_id: str, done, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        task = admin.task(task_id)
        if done(task) or time.monotonic() > deadline:
            return task
        time.sleep(0.05)


def test_an_unlimited_task_counts_the_tokens_of_a_stream_whose_client_did_not_ask(
        gateway: GatewayProcess, upstream: UpstreamServer, admin: Admin) -> None:
    task_id, token = admin.create_task()  # no token or dollar limit
    upstream.script("text", input_tokens=321, output_tokens=12)
    chunks = _stream(gateway.url, token)
    assert [c for c in chunks if not c.choices] == []  # the usage-only chunk stayed with taskgate
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks)
    (sent,) = upstream.requests
    assert sent.json["stream_options"] == {"include_usage": True}
    task = _task(admin, task_id, lambda t: t["input_tokens"] > 0)
    assert (task["input_tokens"], task["output_tokens"], task["unmetered_responses"]) == (321, 12, 0)


@pytest.fixture(scope="module")
def untouched(upstream: UpstreamServer) -> Iterator[GatewayProcess]:
    """A database of its own: the test reads ``tasks list``, which other modules' tasks
    would push past its first page."""
    with fresh_database() as url, GatewayProcess(url, upstream.base_url, TASKGATE_STREAM_USAGE="false") as gw:
        yield gw


def test_turned_off_an_unlimited_task_streams_untouched_and_its_tokens_are_unknown(
        untouched: GatewayProcess, upstream: UpstreamServer) -> None:
    admin = Admin(untouched.url)
    task_id, token = admin.create_task()
    upstream.script("text", input_tokens=321, output_tokens=12)
    _stream(untouched.url, token)
    (sent,) = upstream.requests
    assert "stream_options" not in sent.json
    task = _task(admin, task_id, lambda t: t["unmetered_responses"] > 0)
    assert (task["input_tokens"], task["output_tokens"], task["unmetered_responses"]) == (0, 0, 1)
    env = {"TASKGATE_URL": untouched.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    shown = CliRunner().invoke(main, ["tasks", "show", task_id], env=env)
    assert "unknown" in shown.output and "1 answers without usage" in shown.output, shown.output
    listed = CliRunner().invoke(main, ["tasks", "list"], env=env)
    assert "unknown" in listed.output, listed.output


def test_turned_off_a_limited_task_is_still_asked_for_usage(untouched: GatewayProcess,
                                                             upstream: UpstreamServer) -> None:
    admin = Admin(untouched.url)
    task_id, token = admin.create_task(token_limit=100_000)
    upstream.script("text", input_tokens=321, output_tokens=12)
    chunks = _stream(untouched.url, token)
    assert [c for c in chunks if not c.choices] == []
    (sent,) = upstream.requests
    assert sent.json["stream_options"] == {"include_usage": True}
    task = _task(admin, task_id, lambda t: t["input_tokens"] > 0)
    assert (task["input_tokens"], task["unmetered_responses"]) == (321, 0)
