"""A stream in any of SSE's line endings is relayed byte for byte and ends normally,
also when its last event ends in a lone CR (a real gateway, a scripted raw upstream)."""

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


def _event(text: str, eol: bytes) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + eol + eol


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_the_stream_is_relayed_as_sent_and_ends_normally(gateway: GatewayProcess, raw: RawUpstream, eol: bytes) -> None:
    admin = Admin(gateway.url)
    _, token = admin.create_task()
    parts = [_event("hel", eol), _event("lo", eol), b"data: [DONE]" + eol + eol]
    raw.reply("200 OK", [("content-type", "text/event-stream")], parts[0], 0.02, parts[1], 0.02, parts[2])
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "m", "stream": True, "stream_options": {"include_usage": True},
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    # nothing appended: the [DONE] was read as the stream's end (before the framer, a last
    # event ending in a lone CR was never decoded, so a truncation error followed it)
    assert r.content == b"".join(parts)
