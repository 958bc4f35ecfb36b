"""The pure rules of the strike before the latch (app/guard/strike_rules.py) and of the
no_progress signal (app/guard/progress.py): actions, the strike window, the notes, and
re-runs with byte-identical output after other steps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from app.guard.detector import Action, CallRecord, Thresholds, detect, window_size
from app.guard.policy import Policy
from app.guard.progress import unchanged_reruns
from app.guard.strike_rules import (
    LATCH,
    STRIKE,
    WARN,
    StrikeState,
    answer_sentence,
    next_strike,
    note,
    rule_action,
)
from app.settings import Settings
from tests.task_values import task_value

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


def test_defaults_strike_the_soft_rules_warn_no_progress_and_latch_every_other_rule() -> None:
    assert rule_action("repeated_output", None, {}) == STRIKE
    assert rule_action("repeated_response", None, {}) == STRIKE
    assert rule_action("no_progress", None, {}) == WARN
    for hard in ("repeated_tool_call", "tool_call_cycle", "repeated_tool_failure", "tool_call_limit", "x"):
        assert rule_action(hard, {hard: "warn"}, {hard: "strike"}) == LATCH  # never anything but the latch


def test_the_task_wins_over_the_settings_which_win_over_the_default() -> None:
    assert rule_action("repeated_output", None, {"repeated_output": "warn"}) == WARN
    assert rule_action("repeated_output", {"repeated_output": "latch"}, {"repeated_output": "warn"}) == LATCH
    assert rule_action("repeated_output", {"repeated_output": "bogus"}, {}) == LATCH  # a hand-edited row
    settings = Settings(rule_actions={"no_progress": "latch"})
    policy = Policy(task_value(loop_guard={"rule_actions": {"repeated_response": "warn"}}), settings)
    assert policy.rule_action("repeated_response") == WARN and policy.rule_action("no_progress") == LATCH
    assert policy.thresholds.no_progress_stops and policy.cuts_repeating
    assert not Policy(task_value(loop_guard={"rule_actions": {"repeated_output": "warn"}}), settings).cuts_repeating


def test_a_second_strike_within_the_window_latches() -> None:
    first = next_strike(None, NOW, 3600, "req_1")
    assert (first.count, first.latch) == (1, False)
    state = StrikeState(1, NOW, "req_1")
    assert next_strike(state, NOW + timedelta(seconds=3599), 3600, "req_2").latch
    again = next_strike(state, NOW + timedelta(seconds=3601), 3600, "req_2")  # past the window: a first again
    assert (again.count, again.latch) == (1, False)


def test_one_answer_draws_one_strike() -> None:
    same = next_strike(StrikeState(1, NOW, "req_1"), NOW, 3600, "req_1")
    assert same.repeat and not same.latch and same.count == 1


def test_the_note_says_what_was_repeated_and_stays_short() -> None:
    text = note("repeated_output", {"passage": "Wait, I am confused. Is it msubsup or msubsup? " * 20, "count": 12})
    assert text.startswith("[taskgate] Note: your last answer kept repeating the same passage")
    assert "Wait, I am confused" in text and "12 times" in text and len(text) < 400
    assert "same answer 5 times" in note("repeated_response", {"count": 5})
    assert "pytest" in note("no_progress", {"tool_name": "pytest", "count": 8})
    sentence = answer_sentence("repeated_output", {"count": 10}, streamed=True, window_s=600)
    assert "cut the stream" in sentence and "strike 1 of 2" in sentence and "within 600 s" in sentence
    assert "withheld the answer" in answer_sentence("repeated_response", {"count": 5}, streamed=False,
                                                    window_s=600)


# ------------------------------------------------------------------ no_progress


def run(tool: str, args: str, result: str, n: int) -> CallRecord:
    return CallRecord(f"c{n}", tool, args, result, False)


def edit_rerun(pairs: int, *, edits: int = 1, final: str = "FAILED 1") -> list[CallRecord]:
    """``pairs`` times: ``edits`` edits (each different), then the check with the same output."""
    history, n = [run("pytest", "a", final, 0)], 1
    for p in range(pairs):
        for e in range(edits):
            history.append(run("edit", f"e{p}-{e}", "ok", n))
            n += 1
        history.append(run("pytest", "a", final, n))
        n += 1
    return history


def test_reruns_after_other_steps_with_the_same_output_are_counted() -> None:
    assert unchanged_reruns(edit_rerun(8)) == 8
    assert unchanged_reruns(edit_rerun(3, edits=4)) == 3
    assert unchanged_reruns([]) == 0


def test_a_changed_output_is_progress_and_back_to_back_runs_are_not_reruns() -> None:
    history = edit_rerun(5)
    history[5] = run("pytest", "a", "FAILED 2", 5)  # the check's output changed at its 3rd run
    assert unchanged_reruns(history) == 2
    back_to_back = [run("pytest", "a", "x", i) for i in range(6)]
    assert unchanged_reruns(back_to_back) == 0  # the identical-streak rule's case


def test_the_detector_warns_at_the_threshold_and_stops_only_when_told() -> None:
    thresholds = Thresholds(identical_streak=50, no_progress_reruns=8)
    assert detect(edit_rerun(7), thresholds).action is Action.OK
    verdict = detect(edit_rerun(8), thresholds)
    assert (verdict.action, verdict.reason, verdict.count) == (Action.WARN, "no_progress", 8)
    assert verdict.detail["tool_name"] == "pytest" and verdict.detail["threshold"] == 8
    stops = Thresholds(identical_streak=50, no_progress_reruns=8, no_progress_stops=True)
    assert detect(edit_rerun(8), stops).action is Action.STOP
    assert detect(edit_rerun(20), Thresholds(no_progress_reruns=0)).action is Action.OK  # off
    assert window_size(Thresholds(no_progress_reruns=40)) >= 4 * 80  # the window holds the pairs


@pytest.mark.parametrize("bad", [-1])
def test_a_negative_threshold_is_refused(bad: int) -> None:
    with pytest.raises(ValueError):
        Thresholds(no_progress_reruns=bad)
