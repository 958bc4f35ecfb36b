"""Tests for app.guard.fingerprint: canonical JSON, hashes, conversation keys, failures."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from app.guard.fingerprint import (
    DEFAULT_ERROR_PATTERNS,
    DEFAULT_PATTERNS,
    arguments_hash,
    canonical_json,
    compile_patterns,
    conversation_key,
    is_failure,
    result_hash,
)
from app.wire.base import ToolResult

HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")


# --- canonical_json ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"b": 1, "a": 2}, '{"a":2,"b":1}', id="keys-sorted"),
        pytest.param({"z": {"y": 1, "x": [3, {"d": 1, "c": 2}]}}, '{"z":{"x":[3,{"c":2,"d":1}],"y":1}}',
                     id="nested-sorted"),
        pytest.param([3, 1, 2], "[3,1,2]", id="array-order-kept"),
        pytest.param({"s": "é ✓"}, '{"s":"é ✓"}', id="non-ascii-kept"),
        pytest.param({}, "{}", id="empty-object"),
        pytest.param(None, "null", id="null"),
        pytest.param(1.0, "1.0", id="float-kept"),
        pytest.param("a\nb", '"a\\nb"', id="string-escapes"),
    ],
)
def test_canonical_json(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


# --- arguments_hash ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param('{"b": 2, "a":1}', {"a": 1, "b": 2}, id="text-vs-object"),
        pytest.param('{"b": 2, "a":1}', '{"a":1,"b":2}', id="key-order"),
        pytest.param('{\n  "a": 1\n}\n', '{"a":1}', id="whitespace"),
        pytest.param('{"o":{"y":[1,{"q":1,"p":2}],"x":0}}', {"o": {"x": 0, "y": [1, {"p": 2, "q": 1}]}}, id="nested"),
        pytest.param("", "{}", id="empty-string-is-empty-object"),
        pytest.param("", {}, id="empty-string-is-empty-dict"),
        pytest.param("   \n", {}, id="blank-string-is-empty-dict"),
        pytest.param(None, {}, id="none-is-empty-dict"),
        pytest.param('{"s":"\\u00e9"}', {"s": "é"}, id="unicode-escape"),
    ],
)
def test_arguments_hash_equal(left: object, right: object) -> None:
    assert arguments_hash(left) == arguments_hash(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param("[1,2]", "[2,1]", id="array-order"),
        pytest.param('{"a":1}', '{"a":"1"}', id="number-vs-string"),
        pytest.param('{"a":1}', '{"a":1.0}', id="int-vs-float"),
        pytest.param('{"a":1}', '{"a":2}', id="changed-value"),
        pytest.param('{"path":"a.py"}', '{"path":"a.py","offset":0}', id="extra-key"),
        pytest.param("not json", '"not json"', id="raw-vs-json-string"),
        pytest.param('{"a":', '{"a": ', id="raw-text-exact"),
        pytest.param("{}", "[]", id="object-vs-array"),
        pytest.param("null", "", id="null-vs-empty"),
    ],
)
def test_arguments_hash_different(left: object, right: object) -> None:
    assert arguments_hash(left) != arguments_hash(right)


def test_arguments_hash_material_is_prefixed() -> None:
    assert arguments_hash('{"b":2,"a":1}') == hashlib.sha256(b'json:{"a":1,"b":2}').hexdigest()
    assert arguments_hash("ls -la") == hashlib.sha256(b"raw:ls -la").hexdigest()


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param('{"a": 1}', id="json"),
        pytest.param("free-form text", id="raw"),
        pytest.param('"\\ud800"', id="lone-surrogate"),
        pytest.param("[" * 100_000, id="deeply-nested-unparsable"),
        pytest.param("NaN", id="nan"),
    ],
)
def test_arguments_hash_is_hex_and_never_raises_on_text(arguments: str) -> None:
    assert HEX64.match(arguments_hash(arguments))


# --- result_hash ------------------------------------------------------------------


def test_result_hash_is_sha256_of_utf8() -> None:
    assert result_hash("héllo") == hashlib.sha256("héllo".encode()).hexdigest()


@pytest.mark.parametrize(
    ("left", "right"),
    [
        pytest.param("ok", "ok\n", id="trailing-newline"),
        pytest.param("ok", " ok", id="leading-space"),
        pytest.param("OK", "ok", id="case"),
        pytest.param("", " ", id="empty-vs-space"),
    ],
)
def test_result_hash_is_byte_exact(left: str, right: str) -> None:
    assert result_hash(left) != result_hash(right)


def test_result_hash_lone_surrogate_does_not_raise() -> None:
    assert HEX64.match(result_hash("\ud800"))


# --- conversation_key -------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seed", "prefix", "hashed"),
    [
        pytest.param("sess-1", "seed", "h:", "sess-1", id="header"),
        pytest.param("  sess-1 ", "seed", "h:", "sess-1", id="header-trimmed"),
        pytest.param(None, "seed", "s:", "seed", id="no-header"),
        pytest.param("", "seed", "s:", "seed", id="empty-header"),
        pytest.param("   ", "seed", "s:", "seed", id="blank-header"),
        pytest.param(None, "", "s:", "", id="no-header-no-seed"),
    ],
)
def test_conversation_key(header: str | None, seed: str, prefix: str, hashed: str) -> None:
    key = conversation_key(header, seed)
    assert key == prefix + hashlib.sha256(hashed.encode()).hexdigest()[:32]
    assert len(key) == 34


def test_conversation_key_header_ignores_seed_and_differs_from_seed_key() -> None:
    assert conversation_key("x", "seed-1") == conversation_key("x", "seed-2")
    assert conversation_key("x", "") != conversation_key(None, "x")
    assert conversation_key("a", "") != conversation_key("b", "")
    assert conversation_key(None, "a") != conversation_key(None, "b")


# --- is_failure / patterns --------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "failed"),
    [
        pytest.param("Error: file not found", True, id="leading-Error"),
        pytest.param("  error: cannot open", True, id="leading-error-indented"),
        pytest.param("ERROR : boom", True, id="leading-ERROR-spaced"),
        pytest.param("fatal: not a git repository", True, id="git-fatal"),
        pytest.param("bash: /root/x: Permission denied", True, id="permission-denied"),
        pytest.param("open '/etc/shadow': EACCES", True, id="eacces"),
        pytest.param("sh: 1: foo: command not found", True, id="command-not-found"),
        pytest.param("cat: x.txt: No such file or directory", True, id="no-such-file"),
        pytest.param('Traceback (most recent call last):\n  File "x.py"', True, id="python-traceback"),
        pytest.param("build output...\nexit code: 2", True, id="exit-code"),
        pytest.param("Process exited with code 1", True, id="exited-with-code"),
        pytest.param("exit status 127", True, id="exit-status"),
        pytest.param("All 42 tests passed", False, id="success"),
        pytest.param("exit code: 0", False, id="exit-code-zero"),
        pytest.param("Process exited with code 0", False, id="exited-with-code-zero"),
        pytest.param("def handle(): raise Error: no", False, id="error-colon-not-leading"),
        pytest.param("error handling improved", False, id="error-word-no-colon"),
        pytest.param("Build finished with 0 errors", False, id="zero-errors"),
        pytest.param("", False, id="empty"),
    ],
)
def test_is_failure_default_patterns(output: str, failed: bool) -> None:
    assert is_failure(ToolResult("c1", output), DEFAULT_PATTERNS) is failed
    assert is_failure(ToolResult("c1", output), compile_patterns(DEFAULT_ERROR_PATTERNS)) is failed


@pytest.mark.parametrize(
    ("output", "flag", "failed"),
    [
        pytest.param("all good", True, True, id="flag-true-wins"),
        pytest.param("Error: boom", False, False, id="flag-false-wins"),
        pytest.param("Error: boom", None, True, id="no-flag-patterns"),
    ],
)
def test_is_failure_wire_flag_wins(output: str, flag: bool | None, failed: bool) -> None:
    assert is_failure(ToolResult("c1", output, flag), DEFAULT_PATTERNS) is failed


def test_is_failure_no_patterns_no_flag_is_success() -> None:
    assert is_failure(ToolResult("c1", "Error: boom"), ()) is False


def test_compile_patterns_case_insensitive_and_rejects_bad_regex() -> None:
    (pattern,) = compile_patterns([r"quota exceeded"])
    assert is_failure(ToolResult("c1", "QUOTA EXCEEDED for today"), [pattern])
    with pytest.raises(ValueError):
        compile_patterns(["("])


def test_default_patterns_are_documented_strings() -> None:
    assert all(isinstance(p, str) for p in DEFAULT_ERROR_PATTERNS)
    assert len(DEFAULT_PATTERNS) == len(DEFAULT_ERROR_PATTERNS)
    json.dumps(DEFAULT_ERROR_PATTERNS)  # config-friendly
