"""The effective policy (app/guard/policy.py): the task's column or override, else the setting."""

from __future__ import annotations

import pytest

from app.guard.conversation_rules import ConversationLimits
from app.guard.policy import Policy
from app.settings import Settings
from app.task import LoopGuard
from tests.task_values import task_value


def _settings(**values: object) -> Settings:
    return Settings(database_url="postgresql+asyncpg://unused/x", **values)  # type: ignore[arg-type]


def test_nothing_set_on_the_task_means_the_settings() -> None:
    s = _settings(identical_streak=7, cycle_repeats=4, failure_streak=9, empty_result_streak=6,
                  tool_call_limit=50, conversation_tool_call_limit=20, conversation_request_limit=8,
                  conversation_max_duration_s=60.0, response_repeats=3, repeated_output=False,
                  stream_first_event_timeout_s=11.0, stream_idle_timeout_s=12.0, upstream_timeout_s=13.0,
                  cost_wait_s=14.0, loop_warning=True, loop_warning_after=2)
    p = Policy(task_value(), s)
    t = p.thresholds
    assert (t.identical_streak, t.cycle_repeats, t.failure_streak, t.empty_result_streak) == (7, 4, 9, 6)
    assert (t.tool_call_limit, t.conversation_tool_call_limit, t.warn_after) == (50, 20, 2)
    assert p.conversation == ConversationLimits(request_limit=8, max_duration_s=60.0)
    assert (p.response_repeats, p.repeated_output) == (3, False)
    assert (p.first_event_timeout_s, p.idle_timeout_s, p.upstream_timeout_s, p.cost_wait_s) == (11, 12, 13, 14)


def test_the_task_wins_where_it_says_something() -> None:
    s = _settings(per_tool_thresholds={"a": 3, "b": 4}, loop_warning=False, repeated_output=True,
                  conversation_request_limit=8, response_repeats=5)
    task = task_value(
        loop_guard=LoopGuard(identical_streak=2, per_tool_thresholds={"b": 9}, loop_warning=True,
                             loop_warning_after=1, response_repeats=0, repeated_output=False),
        tool_call_limit=0, conversation_request_limit=2, conversation_max_duration_s=1.5,
        stream_first_event_timeout_s=0.0, stream_idle_timeout_s=0.25, upstream_timeout_s=2.0, cost_wait_s=0.5)
    p = Policy(task, s)
    assert p.thresholds.identical_streak == 2
    assert dict(p.thresholds.per_tool) == {"a": 3, "b": 9}  # merged, the task's win
    assert p.thresholds.warn_after == 1 and p.thresholds.tool_call_limit == 0  # 0 is a limit, not "unset"
    assert p.conversation == ConversationLimits(request_limit=2, max_duration_s=1.5)
    assert (p.response_repeats, p.repeated_output) == (0, False)  # 0 / False are values, not "unset"
    assert (p.first_event_timeout_s, p.idle_timeout_s, p.upstream_timeout_s, p.cost_wait_s) == (0, 0.25, 2, 0.5)


def test_warnings_off_mean_no_warn_threshold() -> None:
    assert Policy(task_value(), _settings(loop_warning=False)).thresholds.warn_after is None
    task = task_value(loop_guard={"loop_warning": False})
    assert Policy(task, _settings(loop_warning=True)).thresholds.warn_after is None


def test_normalizer_is_defaults_then_global_then_the_tasks_patterns() -> None:
    s = _settings(result_normalizers=("g+",))
    p = Policy(task_value(loop_guard={"result_normalizers": ["t+"], "result_normalizer_defaults": False}), s)
    assert "ggg" not in p.normalizer("ggg ttt x") and "ttt" not in p.normalizer("ggg ttt x")
    assert Policy(task_value(), s).normalizer("ttt") == "ttt"


def test_a_zero_upstream_timeout_on_the_task_means_the_setting() -> None:
    assert Policy(task_value(upstream_timeout_s=0.0), _settings(upstream_timeout_s=9.0)).upstream_timeout_s == 9.0


def test_thresholds_are_resolved_only_when_read() -> None:
    p = Policy(task_value(loop_guard={"cycle_repeats": 1}), _settings())  # a hand-edited row
    assert p.repeated_output in (True, False)  # the rest of the policy still reads
    with pytest.raises(ValueError, match="cycle_repeats"):
        p.thresholds
