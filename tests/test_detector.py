"""Tests for app.guard.detector: loop shapes that must stop, healthy shapes that must not."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Sequence

import pytest

from app.guard.detector import (
    MAX_WINDOW,
    MIN_WINDOW,
    OK,
    Action,
    CallRecord,
    Thresholds,
    Verdict,
    detect,
    window_size,
)
from app.guard.fingerprint import DEFAULT_PATTERNS, arguments_hash, is_failure, result_hash
from app.wire.base import ToolResult

_ids = itertools.count()

DEFAULT = Thresholds()
REPEATED, CYCLE, FAILURE, LIMIT = "repeated_tool_call", "tool_call_cycle", "repeated_tool_failure", "tool_call_limit"


def call(tool: str, args: object = "{}", result: str = "ok", *, error: bool | None = False) -> CallRecord:
    """A completed call, hashed the way the ledger will hash it."""
    return CallRecord(f"call_{next(_ids)}", tool, arguments_hash(args), result_hash(result), error)


def pending(tool: str, args: object = "{}") -> CallRecord:
    return CallRecord(f"call_{next(_ids)}", tool, arguments_hash(args), None, None)


def observed(tool: str, args: str, output: str) -> CallRecord:
    """A completed call whose failure flag comes from the default patterns (no wire flag)."""
    failed = is_failure(ToolResult("x", output), DEFAULT_PATTERNS)
    return call(tool, args, output, error=failed)


def same(n: int, tool: str = "read_file", args: str = '{"path":"a.py"}', result: str = "same") -> list[CallRecord]:
    return [call(tool, args, result) for _ in range(n)]


def failures(n: int, tool: str = "bash", args: str = '{"cmd":"make"}') -> list[CallRecord]:
    """n failures of one call, each with different error text."""
    return [call(tool, args, f"Error: build failed at step {i}", error=True) for i in range(n)]


def cycle(block: Sequence[str], repeats: int) -> list[CallRecord]:
    """A cycle over tools named in ``block``, each call with fixed args and result."""
    return [call(t, f'{{"t":"{t}"}}', f"result of {t}") for _ in range(repeats) for t in block]


def interleave(records: list[CallRecord], filler: str = "think") -> list[CallRecord]:
    """Put a pending record of another tool after each record."""
    return [r for rec in records for r in (rec, pending(filler))]


def read_edit_test(rounds: int) -> list[CallRecord]:
    out: list[CallRecord] = []
    for i in range(rounds):
        out += [
            call("read_file", '{"path":"app.py"}', f"content v{i}"),
            call("edit_file", f'{{"path":"app.py","patch":"fix {i}"}}', "ok"),
            call("run_tests", "{}", f"{rounds - i} failed"),
        ]
    return out


def retries() -> list[CallRecord]:
    fetch = '{"url":"https://example.com"}'
    return [
        call("fetch", fetch, "Error: timeout", error=True),
        call("fetch", fetch, "Error: timeout", error=True),
        call("fetch", fetch, "200 OK"),
        call("read_file", '{"path":"b.py"}', "b"),
    ]


STOP_CASES = [
    # rule 1: identical streak
    pytest.param(same(5), DEFAULT, 0, REPEATED, 5, id="identical-x5"),
    pytest.param(same(30), DEFAULT, 0, REPEATED, 30, id="identical-x30"),
    pytest.param(interleave(same(5)), DEFAULT, 0, REPEATED, 5, id="identical-with-pending-between"),
    pytest.param(
        [call("grep", a, "hit") for a in ['{"q":"x","path":"."}', '{"path": ".", "q": "x"}'] * 3][:5],
        DEFAULT, 0, REPEATED, 5, id="identical-key-order-changed",
    ),
    pytest.param(same(5, result="Error: nope"), DEFAULT, 0, REPEATED, 5, id="identical-error-result"),
    pytest.param(same(5, result=""), DEFAULT, 0, REPEATED, 5, id="identical-empty-result"),
    pytest.param(same(5, tool="lookup", args=""), DEFAULT, 0, REPEATED, 5, id="identical-no-args"),
    pytest.param(
        [observed("bash", '{"cmd":"cat /root/x"}', "bash: /root/x: Permission denied") for _ in range(5)],
        DEFAULT, 0, REPEATED, 5, id="permission-denied-identical",
    ),
    pytest.param(same(2) + [call("read_file", '{"path":"a.py"}', "new")] + same(5), DEFAULT, 0, REPEATED, 5, id="identical-after-reset"),
    # rule 2: cycles
    pytest.param(cycle("AB", 5), DEFAULT, 0, CYCLE, 5, id="cycle-AB-x5"),
    pytest.param(cycle("ABC", 5), DEFAULT, 0, CYCLE, 5, id="cycle-ABC-x5"),
    pytest.param(cycle("AAB", 5), DEFAULT, 0, CYCLE, 5, id="cycle-AAB-x5"),
    pytest.param(cycle("AB", 5) + cycle("A", 1), DEFAULT, 0, CYCLE, 5, id="cycle-rotated-BA-x5"),
    pytest.param(cycle("AB", 9), DEFAULT, 0, CYCLE, 9, id="cycle-AB-x9"),
    pytest.param(interleave(cycle("ABC", 5)), DEFAULT, 0, CYCLE, 5, id="cycle-with-pending-between"),
    # rule 3: failure streaks
    pytest.param(failures(12), DEFAULT, 0, FAILURE, 12, id="failures-x12-different-text"),
    pytest.param(
        [observed("bash", f'{{"cmd":"cat /root/x{i}"}}', f"bash: /root/x{i}: Permission denied") for i in range(12)],
        DEFAULT, 0, FAILURE, 12, id="permission-denied-x12-via-patterns",
    ),
    pytest.param(
        [r for i, f in enumerate(failures(12)) for r in (f, call("read_file", f'{{"path":"f{i}"}}', f"c{i}"))],
        DEFAULT, 0, FAILURE, 12, id="failures-interleaved-with-other-tool",
    ),
    pytest.param(failures(6) + [call("read_file")] + failures(6), DEFAULT, 0, FAILURE, 12, id="failures-other-tool-success-does-not-clear"),
    pytest.param(failures(11) + [call("bash", '{"cmd":"ls"}', "ok")] + failures(12), DEFAULT, 0, FAILURE, 12, id="failures-after-success"),
    # rule 4: per-tool override
    pytest.param(same(20, tool="check_status", args="{}"), Thresholds(per_tool={"check_status": 20}), 0, REPEATED, 20, id="polling-override-x20"),
    pytest.param(same(2, tool="deploy"), Thresholds(per_tool={"deploy": 2}), 0, REPEATED, 2, id="lower-override-x2"),
    pytest.param(
        cycle(["check_status", "sleep"], 20), Thresholds(per_tool={"check_status": 20}), 0, CYCLE, 20, id="override-cycle-x20",
    ),
    # rule 5: task tool-call limit
    pytest.param([], Thresholds(tool_call_limit=10), 11, LIMIT, 11, id="limit-exceeded"),
    pytest.param(read_edit_test(2), Thresholds(tool_call_limit=0), 1, LIMIT, 1, id="limit-zero"),
    # parallel calls inside one response
    pytest.param(same(5, tool="search", args='{"q":"foo"}', result="3 hits"), DEFAULT, 0, REPEATED, 5, id="parallel-identical-x5"),
]


@pytest.mark.parametrize(("history", "thresholds", "task_calls", "reason", "count"), STOP_CASES)
def test_loops_stop(history: list[CallRecord], thresholds: Thresholds, task_calls: int, reason: str, count: int) -> None:
    verdict = detect(history, thresholds, task_tool_calls=task_calls)
    assert (verdict.action, verdict.reason, verdict.count) == (Action.STOP, reason, count)
    assert verdict.detail["count"] == count
    json.dumps(verdict.detail)


OK_CASES = [
    pytest.param([], DEFAULT, id="empty"),
    pytest.param([pending("a"), pending("a")], DEFAULT, id="only-pending"),
    pytest.param(read_edit_test(15), DEFAULT, id="read-edit-test-result-changes"),
    pytest.param([call("check_status", "{}", f"running {i}%") for i in range(40)], DEFAULT, id="polling-result-changes"),
    pytest.param(same(19, tool="check_status", args="{}"), Thresholds(per_tool={"check_status": 20}), id="polling-override-x19"),
    pytest.param([call("read_file", f'{{"path":"f{i}.py"}}', "same") for i in range(30)], DEFAULT, id="same-tool-different-files"),
    pytest.param(
        [call("read_file", f'{{"path":"big.log","offset":{i * 100}}}', "line") for i in range(30)], DEFAULT, id="increasing-offsets",
    ),
    pytest.param(
        [r for i in range(10) for r in (call("edit_file", f'{{"n":{i}}}', "ok"), call("run_tests", "{}", "1 failed"))],
        DEFAULT, id="rerun-tests-after-edits",
    ),
    pytest.param(retries(), DEFAULT, id="retries-after-transient-error"),
    pytest.param(failures(11), DEFAULT, id="failures-x11"),
    pytest.param(failures(11) + [call("bash", '{"cmd":"make"}', "built")] + failures(11), DEFAULT, id="failure-streak-broken-by-success"),
    pytest.param(failures(11) + [call("bash", '{"cmd":"make"}', "built", error=None)], DEFAULT, id="unflagged-result-is-success"),
    pytest.param(cycle("AB", 4), DEFAULT, id="cycle-AB-x4"),
    pytest.param(cycle("ABC", 4), DEFAULT, id="cycle-ABC-x4"),
    pytest.param(cycle("AB", 4) + cycle("A", 1), DEFAULT, id="cycle-AB-x4-plus-A"),
    pytest.param(same(4), DEFAULT, id="identical-x4"),
    pytest.param(same(4) + [pending("read_file", '{"path":"a.py"}')], DEFAULT, id="pending-does-not-extend-streak"),
    pytest.param(same(4) + [call("read_file", '{"path":"a.py"}', "changed")] + same(4), DEFAULT, id="changed-result-resets"),
    pytest.param(same(4) + [call("read_file", '{"path":"b.py"}', "same")] + same(4), DEFAULT, id="changed-args-resets"),
    pytest.param(same(4, tool="deploy"), Thresholds(per_tool={"check_status": 20}), id="override-other-tool-unaffected"),
    pytest.param(cycle(["check_status", "sleep"], 19), Thresholds(per_tool={"check_status": 20}), id="override-cycle-x19"),
    pytest.param(failures(4), Thresholds(per_tool={"bash": 2}, identical_streak=2), id="override-ignored-by-failure-rule"),
]


@pytest.mark.parametrize(("history", "thresholds"), OK_CASES)
def test_healthy_shapes_do_not_stop(history: list[CallRecord], thresholds: Thresholds) -> None:
    assert detect(history, thresholds) == OK


# --- boundaries: threshold - 1 and threshold for every rule ----------------------


@pytest.mark.parametrize(
    ("build", "thresholds", "threshold", "reason"),
    [
        pytest.param(same, DEFAULT, 5, REPEATED, id="identical-default"),
        pytest.param(same, Thresholds(identical_streak=8), 8, REPEATED, id="identical-custom"),
        pytest.param(lambda n: same(n, tool="poll"), Thresholds(per_tool={"poll": 20}), 20, REPEATED, id="per-tool"),
        pytest.param(lambda n: cycle("AB", n), DEFAULT, 5, CYCLE, id="cycle-2"),
        pytest.param(lambda n: cycle("ABC", n), DEFAULT, 5, CYCLE, id="cycle-3"),
        pytest.param(lambda n: cycle("AB", n), Thresholds(cycle_repeats=3), 3, CYCLE, id="cycle-custom"),
        pytest.param(failures, DEFAULT, 12, FAILURE, id="failure-default"),
        pytest.param(failures, Thresholds(failure_streak=3), 3, FAILURE, id="failure-custom"),
    ],
)
def test_boundaries(build, thresholds: Thresholds, threshold: int, reason: str) -> None:
    assert detect(build(threshold - 1), thresholds).action is not Action.STOP
    verdict = detect(build(threshold), thresholds)
    assert (verdict.action, verdict.reason, verdict.count) == (Action.STOP, reason, threshold)
    assert verdict.detail["threshold"] == threshold


@pytest.mark.parametrize(
    ("limit", "task_calls", "action"),
    [
        pytest.param(None, 10_000, Action.OK, id="no-limit"),
        pytest.param(10, 9, Action.OK, id="below"),
        pytest.param(10, 10, Action.OK, id="at-limit"),
        pytest.param(10, 11, Action.STOP, id="limit-plus-one"),
        pytest.param(0, 0, Action.OK, id="zero-no-calls"),
        pytest.param(0, 1, Action.STOP, id="zero-one-call"),
    ],
)
def test_tool_call_limit_boundary(limit: int | None, task_calls: int, action: Action) -> None:
    verdict = detect(read_edit_test(3), Thresholds(tool_call_limit=limit), task_tool_calls=task_calls)
    assert verdict.action is action
    if action is Action.STOP:
        assert verdict.reason == LIMIT
        assert verdict.detail == {"count": task_calls, "threshold": limit}


# --- rule 6: warn -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "warn_after", "action", "per_tool"),
    [
        pytest.param(2, 3, Action.OK, {}, id="2-of-warn3"),
        pytest.param(3, 3, Action.WARN, {}, id="3-of-warn3"),
        pytest.param(4, 3, Action.WARN, {}, id="4-of-warn3"),
        pytest.param(5, 3, Action.STOP, {}, id="5-of-warn3-stops"),
        pytest.param(4, None, Action.OK, {}, id="4-no-warn"),
        pytest.param(3, 5, Action.OK, {}, id="3-of-warn5"),
        pytest.param(5, 5, Action.STOP, {}, id="warn-at-threshold-is-stop"),
        pytest.param(19, 3, Action.WARN, {"read_file": 20}, id="19-with-override-warns"),
    ],
)
def test_warn(n: int, warn_after: int | None, action: Action, per_tool: dict[str, int]) -> None:
    verdict = detect(same(n), Thresholds(warn_after=warn_after, per_tool=per_tool))
    assert verdict.action is action
    if action is not Action.OK:
        assert (verdict.reason, verdict.count) == (REPEATED, n)


def test_warn_with_pending_between() -> None:
    verdict = detect(interleave(same(3)), Thresholds(warn_after=3))
    assert (verdict.action, verdict.count) == (Action.WARN, 3)


# --- pending records ----------------------------------------------------------------


@pytest.mark.parametrize(
    "history",
    [
        pytest.param(same(2) + [pending("read_file")] + same(3), id="pending-same-tool-in-middle"),
        pytest.param(same(2) + [pending("bash", '{"cmd":"x"}')] * 3 + same(3), id="pending-other-tool-in-middle"),
        pytest.param([pending("a")] + same(5) + [pending("b")], id="pending-at-both-ends"),
    ],
)
def test_pending_records_do_not_break_streaks(history: list[CallRecord]) -> None:
    assert detect(history, DEFAULT).reason == REPEATED


def test_pending_does_not_break_failure_streak() -> None:
    history = failures(6) + [pending("bash", '{"cmd":"make"}')] + failures(6)
    assert detect(history, DEFAULT).reason == FAILURE


# --- conversations ----------------------------------------------------------------


def by_conversation(stream: list[tuple[str, CallRecord]]) -> dict[str, list[CallRecord]]:
    out: dict[str, list[CallRecord]] = defaultdict(list)
    for key, record in stream:
        out[key].append(record)
    return out


def test_two_sub_agents_each_looping_each_stop() -> None:
    sub1, sub2 = same(5, tool="grep"), cycle("XY", 5)
    stream = [(k, r) for pair in itertools.zip_longest(sub1, sub2) for k, r in zip(("sub-1", "sub-2"), pair) if r]
    verdicts = {k: detect(h, DEFAULT) for k, h in by_conversation(stream).items()}
    assert (verdicts["sub-1"].reason, verdicts["sub-2"].reason) == (REPEATED, CYCLE)


def test_two_interleaved_conversations_not_looping() -> None:
    # Each conversation calls the same thing only 3 times; merged it would look like a loop.
    stream = [(k, r) for _ in range(3) for k, r in (("c1", same(1)[0]), ("c2", same(1)[0]))]
    merged = [r for _, r in stream]
    assert detect(merged, DEFAULT).action is Action.STOP
    for history in by_conversation(stream).values():
        assert detect(history, DEFAULT) == OK


# --- precedence -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "thresholds", "task_calls", "reason"),
    [
        pytest.param(same(12, result="Error: x"), Thresholds(tool_call_limit=0), 1, REPEATED, id="identical-over-failure-and-limit"),
        pytest.param(
            [call("bash", f'{{"cmd":"{c}"}}', f"Error: {c}", error=True) for _ in range(6) for c in "xy"],
            Thresholds(tool_call_limit=0), 1, CYCLE, id="cycle-over-failure-and-limit",
        ),
        pytest.param(failures(12), Thresholds(tool_call_limit=0), 1, FAILURE, id="failure-over-limit"),
        pytest.param(same(3), Thresholds(warn_after=2, tool_call_limit=0), 1, LIMIT, id="stop-over-warn"),
    ],
)
def test_precedence(history: list[CallRecord], thresholds: Thresholds, task_calls: int, reason: str) -> None:
    verdict = detect(history, thresholds, task_tool_calls=task_calls)
    assert (verdict.action, verdict.reason) == (Action.STOP, reason)


def test_failure_picks_longest_then_most_recent_streak() -> None:
    history = failures(13, tool="a") + failures(12, tool="b")
    verdict = detect(history, DEFAULT)
    assert (verdict.detail["tool_name"], verdict.count) == ("a", 13)
    history = failures(12, tool="a") + failures(12, tool="b")
    assert detect(history, DEFAULT).detail["tool_name"] == "b"


# --- verdict detail ---------------------------------------------------------------


def test_identical_detail() -> None:
    history = same(5)
    assert detect(history, DEFAULT).detail == {
        "tool_name": "read_file",
        "arguments_hash": history[-1].arguments_hash,
        "result_hash": history[-1].result_hash,
        "count": 5,
        "threshold": 5,
    }


def test_cycle_detail_lists_block_oldest_first() -> None:
    history = cycle("ABC", 5)
    detail = detect(history, DEFAULT).detail
    assert [c["tool_name"] for c in detail["cycle"]] == ["A", "B", "C"]
    assert detail["cycle"][0]["arguments_hash"] == history[0].arguments_hash
    assert (detail["block_length"], detail["calls"], detail["count"], detail["threshold"]) == (3, 15, 5, 5)


def test_failure_detail_is_latest_failure() -> None:
    history = failures(12)
    detail = detect(history, DEFAULT).detail
    assert (detail["tool_name"], detail["result_hash"], detail["threshold"]) == ("bash", history[-1].result_hash, 12)


def test_ok_verdict_shape() -> None:
    assert OK == Verdict(Action.OK) and OK.reason is None and OK.count == 0 and OK.detail == {}


# --- window -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thresholds", "expected"),
    [
        pytest.param(DEFAULT, MIN_WINDOW, id="defaults"),
        pytest.param(Thresholds(per_tool={"poll": 20}), 4 * 3 * 20, id="override-widens-cycle"),
        pytest.param(Thresholds(failure_streak=30), 120, id="failure"),
        pytest.param(Thresholds(identical_streak=50), 200, id="identical"),
        pytest.param(Thresholds(identical_streak=256), MAX_WINDOW, id="identical-at-the-cap"),
        pytest.param(Thresholds(identical_streak=1_000_000, cycle_repeats=1_000_000, failure_streak=1_000_000),
                     MAX_WINDOW, id="off-in-effect-capped"),
    ],
)
def test_window_size(thresholds: Thresholds, expected: int) -> None:
    assert window_size(thresholds) == expected


@pytest.mark.parametrize(
    "history",
    [
        pytest.param(read_edit_test(40) + same(5), id="identical"),
        pytest.param(read_edit_test(40) + cycle("ABC", 5), id="cycle"),
        pytest.param(read_edit_test(40) + interleave(failures(12)), id="failure"),
    ],
)
def test_window_keeps_verdict(history: list[CallRecord]) -> None:
    assert detect(history[-window_size(DEFAULT) :], DEFAULT) == detect(history, DEFAULT)


def test_a_capped_window_still_sees_a_run_as_long_as_the_cap() -> None:
    """Thresholds past MAX_WINDOW / WINDOW_FACTOR: the window stops growing, and a run as
    long as the threshold, after thousands of other calls, is still seen whole."""
    thresholds = Thresholds(identical_streak=700)
    history = read_edit_test(1000) + same(700)
    window = history[-window_size(thresholds):]
    assert len(window) == MAX_WINDOW < len(history)
    verdict = detect(window, thresholds)
    assert verdict.action is Action.STOP and verdict.reason == "repeated_tool_call" and verdict.count == 700


# --- validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"identical_streak": 0}, id="identical-zero"),
        pytest.param({"failure_streak": 0}, id="failure-zero"),
        pytest.param({"cycle_repeats": 1}, id="cycle-one"),
        pytest.param({"per_tool": {"x": 0}}, id="per-tool-zero"),
        pytest.param({"tool_call_limit": -1}, id="limit-negative"),
        pytest.param({"warn_after": 0}, id="warn-zero"),
    ],
)
def test_thresholds_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Thresholds(**kwargs)
