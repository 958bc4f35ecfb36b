"""Loop detection: one conversation's tool-call history in, one verdict out.

Pure: no I/O, no clock, no database. The caller (the guard ledger) loads the most
recent :func:`window_size` records of one conversation, oldest first, and calls
:func:`detect`; a ``STOP`` verdict is what trips the durable stop latch.

A call's *signature* is ``(tool_name, arguments_hash, result_hash)`` (hashes from
:mod:`app.guard.fingerprint`). Only *completed* records (``result_hash`` not
``None``) take part in rules 1-3; pending ones are skipped, neither breaking nor
extending a streak. An error result is a result, and so is an empty one.

Rules (defaults in parentheses; rules 7 and 8 are new in the second generation):

1. ``repeated_tool_call``: the trailing run of completed calls with one signature
   has length >= the identical threshold (5).
2. ``tool_call_cycle``: the trailing completed calls are a block of 2 or 3
   signatures, not all equal, repeated >= ``cycle_repeats`` (5) full times in a
   row: ``A,B`` x5 is 10 calls, ``A,B,C`` x5 is 15. The block may start anywhere
   in the cycle (``B,A`` x5 after a leading ``A`` is still a cycle).
3. ``repeated_tool_failure``: some tool's own completed calls (other tools' calls
   in between ignored) end with >= ``failure_streak`` (12) failures, whatever the
   error text. Only a success of that same tool clears it. A completed record with
   ``is_error`` ``None`` counts as a success.
4. Per-tool override (``per_tool``): replaces the identical threshold for runs of
   that tool (a polling allowance, e.g. ``{"check_status": 20}``; it may also be
   lower than the default). For rule 2 the threshold is the max of
   ``cycle_repeats`` and the overrides of the tools in the block, so an override
   only ever loosens the cycle rule. Rule 3 ignores overrides.
5. ``tool_call_limit``: ``task_tool_calls > tool_call_limit``. The limit is the
   number of calls allowed; the task's (limit+1)th call trips it. It counts the
   whole task (all conversations), so the caller passes the count.
6. Warn: with ``warn_after`` set, a trailing identical run of length >=
   ``warn_after`` and < its stop threshold gives ``WARN`` ``repeated_tool_call``.
7. ``repeated_empty_result``: some tool's own completed calls end with >=
   ``empty_result_streak`` (12) empty results (``is_empty``: ``""``, ``[]``, ``{}``,
   ``null``, a no-match message; :func:`app.guard.fingerprint.is_empty_result`),
   whatever the arguments. Only a non-empty success of that tool clears it; a
   non-empty failure neither extends nor clears it. A per-tool override (rule 4)
   raises the threshold for that tool, never lowers it.
8. ``conversation_tool_call_limit``: ``conversation_tool_calls >
   conversation_tool_call_limit`` (the caller passes the conversation's count).
9. ``no_progress`` (issue 34): the latest check re-run after other steps with
   byte-identical output ``no_progress_reruns`` (8) times in a row
   (:func:`app.guard.progress.unchanged_reruns`); ``WARN`` unless
   ``no_progress_stops`` (its action is ``strike`` or ``latch``,
   :mod:`app.guard.strike_rules`), then ``STOP`` after every other stop.

Precedence: any stop beats a warn; among stops the first of
:data:`STOP_PRECEDENCE` wins (most specific diagnosis first: identical, cycle,
failure, empty results, then the conversation's and the task's call ceilings as
generic backstops). Rules 1 and 2 never both fire (a block of equal signatures is
not a cycle). Rules decided elsewhere, on responses and at admission, are listed in
:data:`app.guard.conversation_rules.PRECEDENCE_NOTE`.

Cost: O(len(history)) time and memory.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.guard.progress import no_progress_detail, unchanged_reruns
from app.guard.strike_rules import REASON_NO_PROGRESS
from app.stop_reasons import CallLimitDetail, CallStreakDetail, CycleDetail, StopReason, ToolCallDetail

DEFAULT_IDENTICAL_STREAK = 5
DEFAULT_CYCLE_REPEATS = 5
DEFAULT_FAILURE_STREAK = 12
DEFAULT_EMPTY_RESULT_STREAK = 12
#: Block lengths checked by the cycle rule (length 1 is the identical rule).
CYCLE_LENGTHS: tuple[int, ...] = (2, 3)
#: :func:`window_size` headroom over the longest run a rule needs, for pending
#: records and for failure streaks interleaved with other tools' calls.
WINDOW_FACTOR = 4
MIN_WINDOW = 64
#: The most records :func:`window_size` loads, whatever the thresholds: every agent turn
#: reads, digests and judges its conversation's window (1,024 records: a run of up to
#: 1,024 calls is still seen whole, 256 with the full headroom).
MAX_WINDOW = 1024

REASON_REPEATED_TOOL_CALL: Final[StopReason] = "repeated_tool_call"
REASON_TOOL_CALL_CYCLE: Final[StopReason] = "tool_call_cycle"
REASON_REPEATED_TOOL_FAILURE: Final[StopReason] = "repeated_tool_failure"
REASON_TOOL_CALL_LIMIT: Final[StopReason] = "tool_call_limit"
REASON_REPEATED_EMPTY_RESULT: Final[StopReason] = "repeated_empty_result"
REASON_CONVERSATION_TOOL_CALL_LIMIT: Final[StopReason] = "conversation_tool_call_limit"
#: Order in which stop reasons win when several rules fire at once.
STOP_PRECEDENCE: tuple[StopReason, ...] = (
    REASON_REPEATED_TOOL_CALL,
    REASON_TOOL_CALL_CYCLE,
    REASON_REPEATED_TOOL_FAILURE,
    REASON_REPEATED_EMPTY_RESULT,
    REASON_CONVERSATION_TOOL_CALL_LIMIT,
    REASON_TOOL_CALL_LIMIT,
)

Signature = tuple[str, str, str | None]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One tool call invocation, in conversation order.

    ``result_hash`` and ``is_error`` are ``None`` while the call is pending (no
    result seen yet). ``is_error`` is the resolved failure flag
    (:func:`app.guard.fingerprint.is_failure`); ``is_empty`` whether the result said
    nothing (:func:`app.guard.fingerprint.is_empty_result`; ``None``: unknown).
    """

    call_id: str
    tool_name: str
    arguments_hash: str
    result_hash: str | None
    is_error: bool | None
    is_empty: bool | None = None

    @property
    def completed(self) -> bool:
        return self.result_hash is not None

    @property
    def signature(self) -> Signature:
        return (self.tool_name, self.arguments_hash, self.result_hash)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Detector settings; counts are numbers of calls (cycles: block repeats).

    Raises ``ValueError`` for a count below 1, ``cycle_repeats`` below 2 (one
    occurrence of a block is not a repetition) or a negative ``tool_call_limit``.
    """

    identical_streak: int = DEFAULT_IDENTICAL_STREAK
    cycle_repeats: int = DEFAULT_CYCLE_REPEATS
    failure_streak: int = DEFAULT_FAILURE_STREAK
    per_tool: Mapping[str, int] = field(default_factory=dict)
    tool_call_limit: int | None = None
    warn_after: int | None = None
    empty_result_streak: int = DEFAULT_EMPTY_RESULT_STREAK
    conversation_tool_call_limit: int | None = None
    #: ``no_progress`` threshold (re-runs; 0: off) and whether it stops (else warns).
    no_progress_reruns: int = 0
    no_progress_stops: bool = False

    def __post_init__(self) -> None:
        counts = {"identical_streak": self.identical_streak, "failure_streak": self.failure_streak,
                  "empty_result_streak": self.empty_result_streak}
        counts.update({f"per_tool[{name!r}]": n for name, n in self.per_tool.items()})
        if self.warn_after is not None:
            counts["warn_after"] = self.warn_after
        for label, n in counts.items():
            if n < 1:
                raise ValueError(f"{label} must be >= 1, got {n}")
        if self.cycle_repeats < 2:
            raise ValueError(f"cycle_repeats must be >= 2, got {self.cycle_repeats}")
        if self.no_progress_reruns < 0:
            raise ValueError(f"no_progress_reruns must be >= 0, got {self.no_progress_reruns}")
        for label in ("tool_call_limit", "conversation_tool_call_limit"):
            limit = getattr(self, label)
            if limit is not None and limit < 0:
                raise ValueError(f"{label} must be >= 0, got {limit}")

    def identical_threshold(self, tool_name: str) -> int:
        """Stop threshold for an identical run of ``tool_name`` (rules 1 and 4)."""
        return self.per_tool.get(tool_name, self.identical_streak)

    def cycle_threshold(self, tool_names: Iterable[str]) -> int:
        """Stop threshold, in block repeats, for a cycle over ``tool_names``."""
        overrides = [self.per_tool[n] for n in set(tool_names) if n in self.per_tool]
        return max([self.cycle_repeats, *overrides])

    def empty_threshold(self, tool_name: str) -> int:
        """Stop threshold for a streak of empty results of ``tool_name`` (rule 7)."""
        return max(self.empty_result_streak, self.per_tool.get(tool_name, 0))


class Action(enum.Enum):
    OK = "ok"
    WARN = "warn"
    STOP = "stop"
    #: A soft rule's strike (:mod:`app.guard.strike_rules`): the answer is cut or withheld,
    #: the task goes on (never returned by :func:`detect`).
    STRIKE = "strike"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The detector's answer.

    ``reason``: a ``REASON_*`` code (a warn uses ``"repeated_tool_call"``), ``None``
    for OK. ``count``: the streak length, cycle repeats, failure count or task call
    count that decided it. ``detail``: JSON-serialisable evidence, the reason's typed
    detail (:mod:`app.stop_reasons`): always ``count`` and ``threshold``; plus
    ``tool_name`` / ``arguments_hash`` / ``result_hash`` (identical, failure, empty: the
    latest call; :class:`~app.stop_reasons.CallStreakDetail`) or ``cycle`` (list of
    ``{tool_name, arguments_hash, result_hash}``, oldest first), ``block_length`` and
    ``calls`` (:class:`~app.stop_reasons.CycleDetail`).
    """

    action: Action
    reason: StopReason | None = None
    count: int = 0
    detail: Mapping[str, Any] = field(default_factory=dict)


OK = Verdict(Action.OK)


def _call_detail(record: CallRecord) -> ToolCallDetail:
    return ToolCallDetail(tool_name=record.tool_name, arguments_hash=record.arguments_hash,
                          result_hash=record.result_hash)


def _streak_detail(record: CallRecord, count: int, threshold: int) -> CallStreakDetail:
    """The latest call of a run, the run's length and its threshold."""
    return CallStreakDetail(tool_name=record.tool_name, arguments_hash=record.arguments_hash,
                            result_hash=record.result_hash, count=count, threshold=threshold)


def _trailing_identical_run(done: Sequence[CallRecord]) -> int:
    """Length of the trailing run of equal signatures (0 for no calls)."""
    if not done:
        return 0
    last = done[-1].signature
    run = 0
    for record in reversed(done):
        if record.signature != last:
            break
        run += 1
    return run


def _identical_verdict(done: Sequence[CallRecord], run: int, threshold: int, action: Action) -> Verdict:
    return Verdict(action, REASON_REPEATED_TOOL_CALL, run, _streak_detail(done[-1], run, threshold))


def _cycle_rule(done: Sequence[CallRecord], thresholds: Thresholds) -> Verdict | None:
    signatures = [r.signature for r in done]
    for k in CYCLE_LENGTHS:
        if len(signatures) < 2 * k:
            continue
        block = signatures[-k:]
        if len(set(block)) == 1:
            continue
        repeats = 1
        while (repeats + 1) * k <= len(signatures):
            start = len(signatures) - (repeats + 1) * k
            if signatures[start : start + k] != block:
                break
            repeats += 1
        threshold = thresholds.cycle_threshold(r.tool_name for r in done[-k:])
        if repeats >= threshold:
            detail = CycleDetail(cycle=[_call_detail(r) for r in done[-k:]], block_length=k, calls=repeats * k,
                                 count=repeats, threshold=threshold)
            return Verdict(Action.STOP, REASON_TOOL_CALL_CYCLE, repeats, detail)
    return None


def _trailing_streaks(done: Sequence[CallRecord], counts: Callable[[CallRecord], bool],
                      clears: Callable[[CallRecord], bool]) -> tuple[dict[str, int], dict[str, CallRecord]]:
    """Per tool, the length of the trailing run of its own calls for which ``counts``
    holds (other tools' calls in between ignored; calls neither counting nor clearing
    skipped), ended by the latest call for which ``clears`` holds; and the latest counted
    call of each tool. The first key is the tool with the most recent streak."""
    streaks: dict[str, int] = {}
    latest: dict[str, CallRecord] = {}
    cleared: set[str] = set()
    for record in reversed(done):
        tool = record.tool_name
        if tool in cleared:
            continue
        if counts(record):
            streaks[tool] = streaks.get(tool, 0) + 1
            latest.setdefault(tool, record)
        elif clears(record):
            cleared.add(tool)
    return streaks, latest


def _failure_rule(done: Sequence[CallRecord], thresholds: Thresholds) -> Verdict | None:
    failures, latest = _trailing_streaks(done, lambda r: bool(r.is_error), lambda r: True)
    if not failures:
        return None
    tool = max(failures, key=failures.__getitem__)  # ties: the most recent streak
    count = failures[tool]
    if count < thresholds.failure_streak:
        return None
    detail = _streak_detail(latest[tool], count, thresholds.failure_streak)
    return Verdict(Action.STOP, REASON_REPEATED_TOOL_FAILURE, count, detail)


def _empty_rule(done: Sequence[CallRecord], thresholds: Thresholds) -> Verdict | None:
    # an error result neither extends nor clears an empty-result streak
    streaks, latest = _trailing_streaks(done, lambda r: bool(r.is_empty), lambda r: not r.is_error)
    for tool, count in streaks.items():
        threshold = thresholds.empty_threshold(tool)
        if count >= threshold:
            detail = _streak_detail(latest[tool], count, threshold)
            return Verdict(Action.STOP, REASON_REPEATED_EMPTY_RESULT, count, detail)
    return None


def _limit_rule(reason: StopReason, calls: int, limit: int | None) -> Verdict | None:
    if limit is None or calls <= limit:
        return None
    return Verdict(Action.STOP, reason, calls, CallLimitDetail(count=calls, threshold=limit))


def detect(history: Sequence[CallRecord], thresholds: Thresholds, *, task_tool_calls: int = 0,
           conversation_tool_calls: int = 0) -> Verdict:
    """The verdict for one conversation's call ``history`` (oldest first).

    ``task_tool_calls``: tool calls made so far by the whole task, all
    conversations (rule 5); ``conversation_tool_calls``: by this conversation
    (rule 8). See the module docstring for the rules and precedence.
    """
    done = [r for r in history if r.completed]
    run = _trailing_identical_run(done)
    run_threshold = thresholds.identical_threshold(done[-1].tool_name) if done else 0

    if run and run >= run_threshold:
        return _identical_verdict(done, run, run_threshold, Action.STOP)
    stop = (_cycle_rule(done, thresholds) or _failure_rule(done, thresholds) or _empty_rule(done, thresholds)
            or _limit_rule(REASON_CONVERSATION_TOOL_CALL_LIMIT, conversation_tool_calls,
                           thresholds.conversation_tool_call_limit)
            or _limit_rule(REASON_TOOL_CALL_LIMIT, task_tool_calls, thresholds.tool_call_limit))
    if stop is not None:
        return stop
    reruns = unchanged_reruns(done) if thresholds.no_progress_reruns else 0
    stale = reruns >= thresholds.no_progress_reruns > 0
    if stale and thresholds.no_progress_stops:
        return Verdict(Action.STOP, REASON_NO_PROGRESS, reruns,
                       no_progress_detail(done, reruns, thresholds.no_progress_reruns))
    if thresholds.warn_after is not None and run >= thresholds.warn_after:
        return _identical_verdict(done, run, run_threshold, Action.WARN)
    if stale:
        return Verdict(Action.WARN, REASON_NO_PROGRESS, reruns,
                       no_progress_detail(done, reruns, thresholds.no_progress_reruns))
    return OK


def window_size(thresholds: Thresholds) -> int:
    """How many of a conversation's most recent records (pending included) to load.

    The longest run any rule needs is max(identical threshold incl. overrides,
    3 x cycle threshold, failure streak); the window is ``WINDOW_FACTOR`` times
    that, at least ``MIN_WINDOW`` (64 for the defaults) and at most ``MAX_WINDOW``
    (1,024: thresholds set far above any real loop, say 1,000,000 to turn a rule off
    in effect, would have every turn read its conversation's whole ledger). A
    shorter history only shortens runs, so a window can miss a loop (e.g. a failure
    streak interleaved with very many other calls, a run longer than ``MAX_WINDOW``)
    but never causes a false stop.
    """
    identical = max([thresholds.identical_streak, *thresholds.per_tool.values()])
    cycle = max(CYCLE_LENGTHS) * thresholds.cycle_threshold(thresholds.per_tool)
    need = max(identical, cycle, thresholds.failure_streak, thresholds.empty_result_streak,
               2 * thresholds.no_progress_reruns)
    return min(MAX_WINDOW, max(MIN_WINDOW, WINDOW_FACTOR * need))

