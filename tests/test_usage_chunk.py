"""Streamed usage asked for on the client's behalf and hidden from it (pure parts)."""

from __future__ import annotations

import pytest

from app.proxy.usage_chunk import needs_usage, strip_usage_chunks
from app.task import Task
from app.wire import CHAT_COMPLETIONS, format_for_path
from tests.task_values import task_value

LIMITED = task_value(token_limit=1000, cost_limit_usd=None)


@pytest.mark.parametrize(("path", "payload", "task", "expected"), [
    ("/v1/chat/completions", {"stream": True}, LIMITED, True),
    ("/v1/chat/completions", {"stream": True}, task_value(token_limit=None, cost_limit_usd=5), True),
    ("/v1/chat/completions", {"stream": True}, task_value(token_limit=None, cost_limit_usd=None), True),
    ("/v1/chat/completions", {"stream": False}, LIMITED, False),
    ("/v1/chat/completions", {"stream": True, "stream_options": {"include_usage": True}}, LIMITED, False),
    ("/v1/chat/completions", {"stream": True, "stream_options": {"include_usage": False}}, LIMITED, True),
    ("/v1/completions", {"stream": True}, LIMITED, True),
    ("/v1/responses", {"stream": True}, LIMITED, False),
])
def test_needs_usage(path: str, payload: dict, task: Task, expected: bool) -> None:
    assert needs_usage(format_for_path(path), path, payload, task) is expected


@pytest.mark.parametrize(("task", "expected"), [
    (LIMITED, True), (task_value(token_limit=None, cost_limit_usd=5), True),
    (task_value(token_limit=None, cost_limit_usd=None), False),
])
def test_usage_is_asked_only_for_limited_tasks_when_turned_off(task: Task, expected: bool) -> None:
    path = "/v1/chat/completions"
    assert needs_usage(format_for_path(path), path, {"stream": True}, task, always=False) is expected


def test_with_usage_keeps_other_options() -> None:
    assert CHAT_COMPLETIONS.with_stream_usage({"stream": True, "stream_options": {"x": 1}}) == {
        "stream": True, "stream_options": {"x": 1, "include_usage": True}}


CONTENT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n'
DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize("sep", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_only_the_usage_only_chunk_is_dropped(sep: bytes) -> None:
    stream = (CONTENT + USAGE + DONE).replace(b"\n\n", sep)
    assert strip_usage_chunks(stream, CHAT_COMPLETIONS.is_usage_only) == (CONTENT + DONE).replace(b"\n\n", sep)


def test_streams_without_it_pass_unchanged() -> None:
    assert strip_usage_chunks(CONTENT + DONE, CHAT_COMPLETIONS.is_usage_only) == CONTENT + DONE
    odd = b'data: {"choices":[{"index":0}],"usage":{"total_tokens":3}}\n\n: "usage" comment\n\n'
    assert strip_usage_chunks(odd, CHAT_COMPLETIONS.is_usage_only) == odd
