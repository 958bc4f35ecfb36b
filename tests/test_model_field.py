"""Alias rewrite: only the top-level ``model`` value changes, byte for byte."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from app.proxy.model_field import rewrite_model

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def test_only_the_model_value_changes() -> None:
    body = (b'{ "messages":[{"role":"user","content":"use \\"model\\": x","model":"inner"}],'
            b'\n "model" : "coder" ,"stream":true}')
    out = rewrite_model(body, "qwen2.5-coder-7b-instruct")
    assert out == body.replace(b'"coder"', b'"qwen2.5-coder-7b-instruct"')
    assert json.loads(out)["messages"][0]["model"] == "inner"


def test_a_body_without_model_is_unchanged() -> None:
    body = b'{"input": "hi"}'
    assert rewrite_model(body, "x") is body


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.text(), st.booleans(),
       st.sampled_from([None, 0, 2]))
def test_rewrite_matches_a_json_round_trip(payload: dict, model: str, ascii_only: bool, indent: int | None) -> None:
    alias = "\u2603alias-under-test\u2603"
    payload = {**payload, "model": alias}
    body = json.dumps(payload, ensure_ascii=ascii_only, indent=indent).encode()
    out = rewrite_model(body, model)
    assert json.loads(out) == {**payload, "model": model}
    old = json.dumps(alias, ensure_ascii=ascii_only).encode()
    start = body.index(old)
    assert out[:start] == body[:start]  # everything before the value untouched
    assert out[start:] == json.dumps(model).encode() + body[start + len(old):]  # and after it
