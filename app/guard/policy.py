"""The effective policy of a task: its own column or ``loop_guard`` override, else the
global setting. Resolved here and nowhere else. Pure: no I/O.

One :class:`Policy` is built per request (by admission, or by the proxy for the free
endpoints) and read by the loop guard, admission and the relay. When a response ends the
ledger builds one from the row it locks then (limits may change while an answer streams;
the latest apply, as they always did). Each value is resolved the first time it is read,
so a request pays only for what it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from app.guard.conversation_rules import ConversationLimits
from app.guard.detector import Thresholds
from app.guard.normalize import Normalizer, build
from app.guard.strike_rules import REASON_NO_PROGRESS, WARN, RuleAction
from app.guard.strike_rules import rule_action as _rule_action
from app.settings import Settings
from app.task import LoopGuard, Task

_T = TypeVar("_T")


def _either(own: _T | None, default: _T) -> _T:
    return default if own is None else own


def rule_action(loop_guard: LoopGuard, settings: Settings, rule: str) -> RuleAction:
    """:meth:`Policy.rule_action` of a task whose ``loop_guard`` overrides are known."""
    return _rule_action(rule, loop_guard.rule_actions, settings.rule_actions)


def response_repeats(loop_guard: LoopGuard, settings: Settings) -> int:
    """:attr:`Policy.response_repeats` of a task whose ``loop_guard`` overrides are known
    (a text answer's accounting reads only them and the task's status)."""
    return _either(loop_guard.response_repeats, settings.response_repeats)


@dataclass(frozen=True)
class Policy:
    """What is in force for ``task`` under ``settings`` (units in the names: ``_s``
    seconds; counts are calls, requests or answers)."""

    task: Task
    settings: Settings

    @cached_property
    def thresholds(self) -> Thresholds:
        """The detector's thresholds (rules 1-8): ``loop_guard`` overrides over the
        settings; ``per_tool`` merged (the task's win); the task's ``tool_call_limit`` and
        ``conversation_tool_call_limit`` ceilings. Raises ``ValueError`` when the result is
        invalid (only a hand-edited row can be: the admin API refuses such overrides)."""
        o, s = self.task.loop_guard, self.settings
        warn = _either(o.loop_warning, s.loop_warning)
        return Thresholds(
            identical_streak=_either(o.identical_streak, s.identical_streak),
            cycle_repeats=_either(o.cycle_repeats, s.cycle_repeats),
            failure_streak=_either(o.failure_streak, s.failure_streak),
            per_tool={**s.per_tool_thresholds, **(o.per_tool_thresholds or {})},
            tool_call_limit=_either(self.task.tool_call_limit, s.tool_call_limit),
            warn_after=_either(o.loop_warning_after, s.loop_warning_after) if warn else None,
            empty_result_streak=_either(o.empty_result_streak, s.empty_result_streak),
            conversation_tool_call_limit=_either(self.task.conversation_tool_call_limit,
                                                 s.conversation_tool_call_limit),
            no_progress_reruns=_either(o.no_progress_reruns, s.no_progress_reruns),
            no_progress_stops=self.rule_action(REASON_NO_PROGRESS) != WARN,
        )

    @cached_property
    def conversation(self) -> ConversationLimits:
        """The per-conversation request and duration ceilings (``None``: none)."""
        return ConversationLimits(
            request_limit=_either(self.task.conversation_request_limit, self.settings.conversation_request_limit),
            max_duration_s=_either(self.task.conversation_max_duration_s,
                                   self.settings.conversation_max_duration_s),
        )

    @property
    def response_repeats(self) -> int:
        """Identical text answers in a row that stop the task (``repeated_response``; 0: off)."""
        return response_repeats(self.task.loop_guard, self.settings)

    @property
    def repeated_output(self) -> bool:
        """Whether a streamed answer is watched for a repeating passage."""
        return _either(self.task.loop_guard.repeated_output, self.settings.repeated_output)

    def rule_action(self, rule: str) -> RuleAction:
        """What ``rule`` does when it fires: ``latch``, ``strike`` or ``warn``
        (:func:`app.guard.strike_rules.rule_action`; the hard rules always latch)."""
        return rule_action(self.task.loop_guard, self.settings, rule)

    @property
    def cuts_repeating(self) -> bool:
        """Whether a stream repeating itself is cut (its ``repeated_output`` action
        latches or strikes; a warning lets it finish)."""
        return self.rule_action("repeated_output") != WARN

    @property
    def normalizer(self) -> Normalizer:
        """The tool-result normaliser: the default rules unless the task or the settings
        turn them off, then the global patterns, then the task's own (cached by
        :func:`app.guard.normalize.build`)."""
        o = self.task.loop_guard
        defaults = _either(o.result_normalizer_defaults, self.settings.result_normalizer_defaults)
        return build(defaults, (*self.settings.result_normalizers, *(o.result_normalizers or ())))

    @property
    def first_event_timeout_s(self) -> float:
        """Seconds the stream watchdog waits for the first event (0: off)."""
        return _either(self.task.stream_first_event_timeout_s, self.settings.stream_first_event_timeout_s)

    @property
    def idle_timeout_s(self) -> float:
        """Seconds the stream watchdog allows between events (0: off)."""
        return _either(self.task.stream_idle_timeout_s, self.settings.stream_idle_timeout_s)

    @property
    def upstream_timeout_s(self) -> float:
        """Total seconds a non-streamed POST may take upstream. A zero (never accepted by
        the admin API) means the setting, as it always did."""
        return self.task.upstream_timeout_s or self.settings.upstream_timeout_s

    @property
    def cost_wait_s(self) -> float:
        """Seconds a request held by the dollar ceiling waits before 429 ``cost_reserved``."""
        own = self.task.cost_wait_s
        return self.settings.cost_wait_s if own is None else float(own)
