"""The second-generation rules as pure functions: empty-result streaks and the
conversation tool-call ceiling (app.guard.detector), conversation ceilings and repeated
answers (app.guard.conversation_rules); and the healthy shapes that must never trip them.
Repeated output in one answer: tests/test_repeated_output.py."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone

import pytest

from app.admission.stop_sentences import explain
from app.guard.conversation_rules import ConversationLimits, conversation_breach, repeated_response
from app.guard.detector import OK, Action, CallRecord, Thresholds, detect
from app.guard.fingerprint import DEFAULT_EMPTY_PATTERNS, arguments_hash, is_empty_result, result_hash
from app.guard.normalize import DEFAULT as NORMALIZE

_ids = itertools.count()
EMPTY = "repeated_empty_result"


def done(tool: str, args: object, output: str, *, error: bool = False) -> CallRecord:
    """A completed call, flagged the way the ledger flags it (normalised text)."""
    text = NORMALIZE(output)
    return CallRecord(f"c{next(_ids)}", tool, arguments_hash(args), result_hash(text), error,
                      is_empty_result(text, DEFAULT_EMPTY_PATTERNS))


def searches(n: int, output: str = "No matches found", tool: str = "grep") -> list[CallRecord]:
    return [done(tool, {"pattern": f"p{i}"}, output) for i in range(n)]


# ------------------------------------------------------------ is_empty_result

@pytest.mark.parametrize(("output", "empty"), [
    ("", True), ("  \n", True), ("[]", True), ("{}", True), ("null", True),
    ("No matches found", True), ("No files found", True), ("0 results", True),
    ("Found 0 files matching 'x'", True), ("No results found for query foo", True),
    ("Chunk ID: 1a2b3c\nWall time: 0.01 seconds\nProcess exited with code 0\nOriginal token count: 0\nOutput:\n", True),
    ("Process exited with code 1\nOutput:\n", False),  # a failure, not an empty success
    ("File updated", False), ("3 results", False), ("src/a.py:3: needle", False),
    ("No matches found\nsrc/b.py:1: needle", False),
])
def test_empty_results(output: str, empty: bool) -> None:
    assert is_empty_result(NORMALIZE(output), DEFAULT_EMPTY_PATTERNS) is empty


# ------------------------------------------------------------ repeated_empty_result

@pytest.mark.parametrize(("history", "verdict"), [
    (searches(12), EMPTY),
    (searches(11), None),
    # varied no-match phrasings are one streak
    ([done("grep", {"q": i}, ["No matches found", "0 results", "[]", ""][i % 4]) for i in range(12)], EMPTY),
    # another tool's calls in between neither break nor extend the streak
    ([c for i in range(12) for c in (searches(1)[0], done("think", {"n": i}, f"thought {i}"))], EMPTY),
    # a non-empty success clears it
    (searches(6) + [done("grep", {"pattern": "x"}, "a.py:1: x")] + searches(11), None),
    # a non-empty failure does not clear it
    (searches(6) + [done("grep", {"pattern": "(["}, "Error: bad regex", error=True)] + searches(6), EMPTY),
])
def test_empty_result_streak(history: list[CallRecord], verdict: str | None) -> None:
    v = detect(history, Thresholds())
    assert v.reason == verdict
    if verdict:
        assert v.action is Action.STOP and v.detail["tool_name"] == "grep" and v.count >= 12


def test_empty_result_threshold_follows_task_setting_and_per_tool_allowance() -> None:
    assert detect(searches(4), Thresholds(empty_result_streak=4)).reason == EMPTY
    # a polling tool's per-tool allowance raises the threshold, never lowers it
    polls = [done("check_queue", {"n": i}, "[]") for i in range(19)]
    assert detect(polls, Thresholds(per_tool={"check_queue": 20})) == OK
    assert detect(searches(12), Thresholds(per_tool={"grep": 3})).reason == EMPTY


def test_identical_empty_calls_are_still_the_identical_rule_first() -> None:
    same = [done("grep", {"pattern": "x"}, "No matches found") for _ in range(12)]
    assert detect(same, Thresholds()).reason == "repeated_tool_call"


def test_conversation_tool_call_ceiling() -> None:
    history = [done("read", {"p": i}, f"content {i}") for i in range(3)]
    t = Thresholds(conversation_tool_call_limit=3)
    assert detect(history, t, conversation_tool_calls=3) == OK
    v = detect(history, t, conversation_tool_calls=4)
    assert v.reason == "conversation_tool_call_limit" and v.detail == {"count": 4, "threshold": 3}
    # the more specific conversation ceiling wins over the task's
    both = Thresholds(conversation_tool_call_limit=3, tool_call_limit=3)
    assert detect(history, both, task_tool_calls=9, conversation_tool_calls=4).reason == "conversation_tool_call_limit"


# ------------------------------------------------------------ healthy shapes

def _healthy_shapes() -> dict[str, list[CallRecord]]:
    rng = random.Random(9)
    return {
        # an edit tool answering the same "File updated" for 60 different edits
        "edits": [done("edit", {"path": f"f{i % 7}.py", "old": f"a{i}", "new": f"b{i}"}, "File updated")
                  for i in range(60)],
        # many different searches, some of which find something
        "searches": [done("grep", {"pattern": f"p{i}"},
                          f"src/m{i}.py:3: p{i}" if rng.random() < 0.2 or i % 9 == 0 else "No matches found")
                     for i in range(60)],
        # a test run whose pass count changes
        "tests": [done("bash", {"cmd": "pytest -q"}, f"{i // 3} passed, {20 - i // 3} failed in 0.{i}2s")
                  for i in range(60)],
        # a polling tool under its per-tool allowance
        "polling": [done("check_status", {"job": 1}, "status: running") for _ in range(19)],
    }


@pytest.mark.parametrize("shape", list(_healthy_shapes()))
def test_healthy_shapes_never_trip(shape: str) -> None:
    history = _healthy_shapes()[shape]
    thresholds = Thresholds(per_tool={"check_status": 20})
    for n in range(1, len(history) + 1):  # judged after every call, as the ledger does
        assert detect(history[:n], thresholds, task_tool_calls=n, conversation_tool_calls=n) == OK, (shape, n)


# ------------------------------------------------------------ conversation ceilings, repeated answers

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("row", "limits", "reason"), [
    (None, ConversationLimits(request_limit=1), None),
    ({"requests": 2, "first_request_at": NOW}, ConversationLimits(request_limit=3), None),
    ({"requests": 3, "first_request_at": NOW}, ConversationLimits(request_limit=3), "conversation_request_limit"),
    ({"requests": 1, "first_request_at": NOW - timedelta(seconds=59)}, ConversationLimits(max_duration_s=60), None),
    ({"requests": 1, "first_request_at": NOW - timedelta(seconds=60)}, ConversationLimits(max_duration_s=60),
     "conversation_max_duration"),
    ({"requests": 99, "first_request_at": NOW}, ConversationLimits(), None),
])
def test_conversation_breach(row, limits: ConversationLimits, reason: str | None) -> None:
    breach = conversation_breach(row, limits, NOW)
    assert (breach[0] if breach else None) == reason


def test_repeated_response_threshold() -> None:
    assert repeated_response(4, 5) is None
    assert repeated_response(5, 5) == ("repeated_response", {"count": 5, "threshold": 5})
    assert repeated_response(50, 0) is None  # 0 turns the rule off


@pytest.mark.parametrize("reason", ["repeated_empty_result", "conversation_tool_call_limit",
                                    "conversation_request_limit", "conversation_max_duration",
                                    "repeated_response", "repeated_output"])
def test_every_new_reason_is_explained(reason: str) -> None:
    detail = {"tool_name": "grep", "count": 12, "threshold": 12, "conversation_key": "h:abc",
              "elapsed_s": 61.0, "passage_words": 10, "passage": "I cannot find the file", "average_gap_words": 5.0}
    sentence = explain(reason, detail)
    assert sentence and "None" not in sentence
    if reason.startswith("conversation"):
        assert "h:abc" in sentence


def test_refusal_log_lines_are_rate_limited_per_task() -> None:
    from app.admission.refusals import LOG_INTERVAL_S, log_refusal

    assert log_refusal("t-rate", "request_limit", 1, now=1000.0)
    assert not log_refusal("t-rate", "request_limit", 2, now=1000.0 + LOG_INTERVAL_S / 2)
    assert log_refusal("t-other", "request_limit", 1, now=1000.0 + LOG_INTERVAL_S / 2)
    assert log_refusal("t-rate", "request_limit", 3, now=1000.0 + LOG_INTERVAL_S)


@pytest.mark.parametrize(("path", "body", "continued"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, False),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"},
                                           {"role": "user", "content": "continue"}]}, True),
    ("/v1/responses", {"input": "hi"}, False),
    ("/v1/responses", {"input": [{"role": "user", "content": "hi"}]}, False),
    ("/v1/responses", {"input": [{"role": "user", "content": "hi"}], "previous_response_id": "resp_1"}, True),
    ("/v1/responses", {"input": [{"role": "user", "content": "hi"},
                                 {"type": "message", "role": "assistant",
                                  "content": [{"type": "output_text", "text": "a"}]},
                                 {"role": "user", "content": "continue"}]}, True),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]}, False),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"},
                                   {"role": "user", "content": "go on"}]}, True),
])
def test_requests_continuing_a_conversation_are_recognised(path: str, body: dict, continued: bool) -> None:
    from app.wire import format_for_path

    assert format_for_path(path).parse_request({"model": "m", **body}).continued is continued
