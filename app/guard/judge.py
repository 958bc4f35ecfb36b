"""The loop guard's verdict on a conversation's window, and what it judges from one
request: pure (the ledger's I/O around it is :mod:`app.ledger.tool_calls` before the
request, :mod:`app.settlement.response` after the exchange)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from app.guard.detector import CallRecord, Thresholds, Verdict, detect
from app.guard.normalize import Normalizer
from app.guard.policy import Policy
from app.guard.result_prints import RequestPrints
from app.wire.base import ToolCall, ToolResult


@dataclass(slots=True)
class GuardRequest:
    """What the loop guard needs from one request: its conversation key, the tool
    calls of the trailing assistant turn and the new tool results."""

    conversation_key: str
    tool_calls: Sequence[ToolCall] = field(default_factory=list)
    tool_results: Sequence[ToolResult] = field(default_factory=list)
    #: Fingerprints computed before admission (:mod:`app.guard.result_prints`); ``None``:
    #: computed in :func:`app.ledger.tool_calls.record_request`.
    prints: RequestPrints | None = None


def _describe(verdict: Verdict, thresholds: Thresholds, conversation_key: str,
              normalizer: Normalizer) -> Verdict:
    """Add the conversation key, the thresholds and the result normalisers in force
    (rule names, ``[]`` when results were compared raw) to a verdict's detail."""
    detail = dict(verdict.detail)
    detail.setdefault("conversation_key", conversation_key)
    detail["result_normalizers"] = normalizer.names
    detail["thresholds"] = {
        "identical_streak": thresholds.identical_streak,
        "cycle_repeats": thresholds.cycle_repeats,
        "failure_streak": thresholds.failure_streak,
        "per_tool": dict(thresholds.per_tool),
        "tool_call_limit": thresholds.tool_call_limit,
        "empty_result_streak": thresholds.empty_result_streak,
        "conversation_tool_call_limit": thresholds.conversation_tool_call_limit,
    }
    return Verdict(verdict.action, verdict.reason, verdict.count, detail)


def judge(history: Sequence[CallRecord], policy: Policy, conversation_key: str, normalizer: Normalizer, *,
          task_tool_calls: int, conversation_tool_calls: int) -> Verdict:
    """The detector's verdict on a conversation's window (oldest first), described
    (conversation key, thresholds, normalisers in force)."""
    thresholds = policy.thresholds
    return _describe(detect(history, thresholds, task_tool_calls=task_tool_calls,
                            conversation_tool_calls=conversation_tool_calls), thresholds, conversation_key, normalizer)
