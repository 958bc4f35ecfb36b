"""The gateway's own stop reasons, and the ``stop_detail`` each records.

A task's ``stop_reason`` (``tasks.stop_reason``, ``task_stopped`` refusals, the
``stopped`` event) is one of :data:`StopReason`, or an operator's own code given to
``POST /admin/tasks/{id}/stop`` (so :attr:`app.task.Task.stop_reason` stays ``str``).
The values are the wire's and the database's. Its ``stop_detail`` (JSON) is the typed
detail of its reason below, as the module that decides the stop builds it; an operator's
stop, under any code, records :class:`OperatorStop`. A row is read back as it was
written, not checked against these types: a row of an older version may lack a key or
have another shape (``repeated_output`` before issue 34), so readers use ``.get``. The
sentence each reads as: :mod:`app.admission.stop_sentences`. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypedDict, TypeGuard, get_args

StopReason = Literal[
    # the task's limits (app.admission.limits; repeated_stalls: app.proxy.accounting)
    "request_limit", "token_limit", "max_duration", "cost_limit", "repeated_stalls",
    # the loop guard's detector (app.guard.detector)
    "repeated_tool_call", "tool_call_cycle", "repeated_tool_failure", "tool_call_limit",
    "repeated_empty_result", "conversation_tool_call_limit",
    # a conversation's rules (app.guard.conversation_rules) and the soft rules (app.guard.strike_rules)
    "conversation_request_limit", "conversation_max_duration", "repeated_response", "repeated_output",
    "no_progress",
    # an operator's stop without a code of its own (app.admin)
    "manual",
]
"""A stop reason the gateway writes itself."""

#: Every :data:`StopReason`, e.g. the ``reason`` label values of the metrics.
STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


def is_stop_reason(reason: str | None) -> TypeGuard[StopReason]:
    """Whether ``reason`` is one of the gateway's own (else an operator's code, or none)."""
    return reason in STOP_REASONS


# ------------------------------------------------------------ the task's limits


class RequestLimitDetail(TypedDict):
    """``request_limit``: requests admitted, at or over the task's ``request_limit``."""

    admitted_requests: int
    request_limit: int


class TokenLimitDetail(TypedDict):
    """``token_limit``: input + output tokens upstream reported, at or over ``token_limit``."""

    total_tokens: int
    token_limit: int


class MaxDurationDetail(TypedDict):
    """``max_duration``: seconds since the first admitted request (3 decimals), at or
    over ``max_duration_s``."""

    elapsed_s: float
    max_duration_s: float


class CostLimitDetail(TypedDict):
    """``cost_limit``: dollars as decimal strings: settled, held by requests in flight,
    the next request's reservation, and the task's ``cost_limit_usd``."""

    cost_usd: str
    reserved_usd: str
    request_reservation_usd: str
    cost_limit_usd: str


class RepeatedStallsDetail(TypedDict):
    """``repeated_stalls``: stalled upstream streams, at ``max_stalls``; ``last_stall``:
    the last stalled exchange's outcome detail."""

    stalls: int
    max_stalls: int
    last_stall: Mapping[str, object]


# ------------------------------------------------------------ the loop guard


class ToolCallDetail(TypedDict):
    """One tool call as the guard fingerprinted it (:mod:`app.guard.fingerprint`)."""

    tool_name: str
    arguments_hash: str
    result_hash: str | None


class _Counted(TypedDict):
    """A count at or over its threshold; ``conversation_key``: the conversation it
    happened in, added where the stop is latched."""

    count: int
    threshold: int
    conversation_key: NotRequired[str]


class _Judged(_Counted, total=False):
    """What the guard's judge adds to a detector verdict (:mod:`app.guard.judge`): the
    result normalisers' rule names (``[]``: results compared raw) and the thresholds."""

    result_normalizers: list[str]
    thresholds: dict[str, object]


class _Struck(TypedDict, total=False):
    """What a soft rule's second strike adds when it latches (:mod:`app.guard.strike_rules`)."""

    strikes: int
    strike_window_s: float


class CallStreakDetail(ToolCallDetail, _Judged):
    """``repeated_tool_call`` (identical calls and results in a row),
    ``repeated_tool_failure`` and ``repeated_empty_result`` (one tool's failures or empty
    results in a row): the latest call of the run, its length and the threshold."""


class CycleDetail(_Judged):
    """``tool_call_cycle``: the block of calls (oldest first), its length, the calls in
    the repeated run and the block's repeats (``count``)."""

    cycle: list[ToolCallDetail]
    block_length: int
    calls: int


class CallLimitDetail(_Judged):
    """``tool_call_limit`` and ``conversation_tool_call_limit``: calls made (``count``),
    over the limit (``threshold``)."""


class NoProgressDetail(ToolCallDetail, _Judged, _Struck):
    """``no_progress``: the check re-run with byte-identical output, and its re-runs."""


# ------------------------------------------------------------ a conversation's rules


class ConversationRequestsDetail(TypedDict):
    """``conversation_request_limit``: the conversation's admitted requests, at or over
    the limit (``threshold``)."""

    requests: int
    threshold: int
    conversation_key: NotRequired[str]


class ConversationDurationDetail(TypedDict):
    """``conversation_max_duration``: seconds since the conversation's first counted
    request (3 decimals), at or over ``conversation_max_duration_s`` (``threshold``)."""

    elapsed_s: float
    threshold: float
    conversation_key: NotRequired[str]


class RepeatedResponseDetail(_Counted, _Struck):
    """``repeated_response``: the same answer without tool calls ``count`` times in a row;
    ``text_sha256``: the answer's."""

    text_sha256: NotRequired[str]


#: How the answer that repeated itself reached the client (:class:`RepeatedOutputDetail`'s
#: ``delivered``): ``cut``: streamed, and taskgate cut the stream at the repetition;
#: ``streamed``: streamed, but the stream had ended before the repetition was read, so it
#: reached the client whole; ``whole``: not streamed, the body was delivered whole.
Delivered = Literal["cut", "streamed", "whole"]


class RepeatedOutputDetail(_Struck, total=False):
    """``repeated_output``: one answer repeating a passage
    (:class:`app.guard.repeated_output.OutputMonitor`'s evidence): the passage's length in
    words and text, its distinct words, its occurrences (``count``), their average gap in
    words, and the rule's thresholds; ``delivered`` and ``endpoint`` added by the relay.
    A row recorded before repetition was counted in words (issue 34) has ``chunk_chars``
    and ``average_gap_chars`` instead, and no ``delivered``."""

    passage_words: int
    passage: str
    distinct_words: int
    count: int
    average_gap_words: float
    threshold: int
    max_average_gap_words: int
    delivered: Delivered
    endpoint: str | None
    conversation_key: str
    chunk_chars: int
    average_gap_chars: float


# ------------------------------------------------------------ an operator


class OperatorStop(TypedDict):
    """An operator's stop (``POST /admin/tasks/{id}/stop``), under ``manual`` or a code
    of its own: who, and the operator's note."""

    by: Literal["operator"]
    message: str | None
