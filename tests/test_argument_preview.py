"""Argument previews in the ledger (``TASKGATE_LEDGER_ARGUMENT_PREVIEW=N``): off by default
(hashes only); with N, the first N characters of the canonical arguments with secrets
masked, through a real gateway and the loop guard's ledger."""

from __future__ import annotations

import json
import os

import openai
import pytest

from app.guard.preview import MASK, argument_preview
from tests.support import Admin, GatewayProcess
from tests.test_loop_guard_e2e import chat_agent

GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4"


def test_preview_is_canonical_masked_and_cut():
    args = '{"path": "notes.md", "api_key": "anything", "nested": {"Authorization": "x", "n": [1, 2]}}'
    assert argument_preview(args, 200) == \
        '{"api_key":"***","nested":{"Authorization":"***","n":[1,2]},"path":"notes.md"}'
    assert argument_preview({"cmd": f"curl -H 'Authorization: Bearer abcdefghijklmnop' {GITHUB_TOKEN}"}, 200) \
        == '{"cmd":"curl -H \'Authorization: ***\' ***"}'
    assert argument_preview({"path": "x" * 50}, 20) == '{"path":"' + 'x' * 11 + '…'
    assert argument_preview("not json sk-abcdefghijklmnopqrstuvwx", 100) == f"not json {MASK}"
    assert argument_preview(args, 0) is None
    assert argument_preview("", 10) == "{}"


def test_arguments_nested_deeper_than_json_loads_goes_preview_as_text():
    """A model may write any text as arguments: nesting past the parser's recursion limit
    previews as the raw text (what the arguments hash covers then), not a RecursionError
    (found by tests/test_guard_text_fuzz.py)."""
    deep = "[" * 5_000 + "sk-abcdefghijklmnopqrstuvwx"
    assert argument_preview(deep, 30) == "[" * 30 + "…"
    assert argument_preview("[" * 20 + "sk-abcdefghijklmnopqrstuvwx", 100) == "[" * 20 + MASK


@pytest.mark.parametrize("chars", [0, 40])
def test_the_ledger_keeps_a_preview_only_when_asked(database_url, upstream, chars):
    gw = GatewayProcess(database_url, upstream.base_url, TASKGATE_LEDGER_ARGUMENT_PREVIEW=str(chars))
    gw.start(timeout=60)
    try:
        admin = Admin(gw.url)
        task, token = admin.create_task(id=f"preview-{chars}-{os.getpid()}", request_limit=30)
        upstream.script("tool_call", name="read_file", arguments={"path": "notes.md", "token": GITHUB_TOKEN})
        step = chat_agent(gw, token, stream=False)
        with pytest.raises(openai.APIStatusError):
            for _ in range(12):
                step()
        rows = admin.http.get(f"/admin/tasks/{task}/tool-calls").json()["data"]
        assert len(rows) == 5
        previews = {r["arguments_preview"] for r in rows}
        assert previews == ({None} if chars == 0 else {'{"path":"notes.md","token":"***"}'})
        assert GITHUB_TOKEN not in json.dumps(rows)
    finally:
        upstream.reset()
        gw.stop()
