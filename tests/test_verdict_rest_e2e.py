"""A verdict before the last byte (issue 34 item 3) also when upstream closes a stream
without the blank line after its terminal event: the held-back ``data: [DONE]`` is
released only after the verdict on what preceded it (a real gateway, a raw upstream
writing the exact bytes)."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from tests.raw_upstream import RawUpstream
from tests.support import Admin, GatewayProcess


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def gateway(database_url: str, raw: RawUpstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, raw.base_url) as gw:
        yield gw


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def test_a_tool_call_over_the_ceiling_ending_without_a_blank_line_is_judged_before_its_end(gateway, raw):
    call = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}]}
    raw.reply("200 OK", [("content-type", "text/event-stream")],
              _chunk(call), _chunk({}, "tool_calls"), 0.02, b"data: [DONE]")  # no blank line: upstream closes
    admin = Admin(gateway.url)
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for run in range(20):
            _, token = admin.create_task(tool_call_limit=0)
            headers = {"authorization": f"Bearer {token}"}
            body = {"model": "m", "stream": True, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "hi"}]}
            stream = http.post("/v1/chat/completions", headers=headers, json=body)
            assert stream.content.endswith(b"data: [DONE]"), (run, stream.content[-200:])
            following = http.post("/v1/chat/completions", headers=headers, json=body)  # at once
            assert following.status_code == 400, (run, following.text[:300])
            assert following.json()["error"]["code"] == "tool_call_limit"
