"""app.wire.json_text parses exactly as json.loads does (orjson underneath where that
gives the same answer): same values, same types, same errors."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.wire import json_text

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=20),
    st.integers(min_value=-(2**70), max_value=2**70),  # past 64 bits both ways
    st.floats(allow_nan=False, allow_infinity=False),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=20)


def _same(text: str | bytes) -> None:
    try:
        expected = json.loads(text)
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)):
            json_text.loads(text)
        return
    got = json_text.loads(text)
    assert json.dumps(got) == json.dumps(expected)  # NaN-safe, and int stays int
    assert _types(got) == _types(expected)


def _types(value: object) -> object:
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return type(value).__name__


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_any_json_value_parses_to_the_same_value_and_types(value: object) -> None:
    text = json.dumps(value)
    _same(text)
    _same(text.encode())


@pytest.mark.parametrize("text", [
    "18446744073709551616", "-9223372036854775809", "123456789012345678901234567890",
    "[NaN, Infinity, -Infinity]", "1e400", '"\\ud800"', "\ufeff{}", '{"a": 1, "a": 2}',
    "[1,]", "{", "", "  7 ", '"\x01"', "0.1234567890123456789",
])
def test_the_edges_where_orjson_and_json_differ_answer_as_json(text: str) -> None:
    _same(text)
    _same(text.encode("utf-8", "surrogatepass"))
    _same(text.encode("utf-16"))


def test_nan_is_still_read() -> None:
    assert math.isnan(json_text.loads("NaN"))


def _strings(value: object) -> object:
    """``value`` with every number replaced by its kind: what loads_for_strings keeps."""
    if isinstance(value, dict):
        return {k: _strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v) for v in value]
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else value


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_loads_for_strings_keeps_every_string_key_and_structure(value: object) -> None:
    text = json.dumps(value)
    assert _strings(json_text.loads_for_strings(text)) == _strings(json.loads(text))
    assert _strings(json_text.loads_for_strings(text.encode())) == _strings(json.loads(text))


@pytest.mark.parametrize("text", ['"\\ud800"', '{"a": "x", "a": "y"}', "[NaN]", "\ufeff{}", "{", "", "[1,]"])
def test_loads_for_strings_answers_as_json_where_orjson_differs(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            json_text.loads_for_strings(text)
        return
    assert json.dumps(json_text.loads_for_strings(text)) == json.dumps(expected)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_loads_request_parses_to_the_same_value_and_types(value: object) -> None:
    body = json.dumps(value).encode()
    assert json.dumps(json_text.loads_request(body)) == json.dumps(json.loads(body))
    assert _types(json_text.loads_request(body)) == _types(json.loads(body))
    padded = body + b" " * 1000  # long enough for the nesting walk
    assert json.dumps(json_text.loads_request(padded)) == json.dumps(json.loads(padded))


@pytest.mark.parametrize("depth", [1, 2, 253, 254, 255, 256, 499, 990, 1000, 1023, 1024, 1025, 5000])
def test_loads_request_answers_deep_nesting_as_json_loads(depth: int) -> None:
    """orjson reads 1,024 levels, json.loads stops near the recursion limit: a request
    body nested deeper than MAX_DEPTH is json.loads' to answer (a RecursionError at 1,000)."""
    for body in (b"[" * depth + b"]" * depth, b'{"a":' * depth + b"1" + b"}" * depth):
        try:
            expected = json.loads(body)
        except RecursionError:
            with pytest.raises(RecursionError):
                json_text.loads_request(body)
            continue
        assert json_text.loads_request(body) == expected
        assert json_text.nested_at_most_max_depth(expected) is (depth <= json_text.MAX_DEPTH)


@pytest.mark.parametrize("body", [b"[" * 1000 + b"]" * 1000, b'{"model": "m", "messages": [{"content": '
                                  + b"[" * 1000 + b"]" * 1000 + b"}]}"])
def test_loads_request_refuses_what_json_loads_refuses_though_orjson_reads_it(body: bytes) -> None:
    import orjson

    orjson.loads(body)  # within orjson's 1,024 levels
    with pytest.raises(RecursionError):
        json_text.loads_request(body)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789a٣ \ud800", max_size=60))
def test_long_digit_runs_are_found_as_the_pattern_finds_them(text: str) -> None:
    import re

    expected = re.search(r"[0-9]{19}", text) is not None
    assert json_text.has_long_digits(text) is expected
    assert json_text.has_long_digits(text.encode("utf-8", "surrogatepass")) is expected
