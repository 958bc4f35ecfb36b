"""``no_progress``: the agent re-runs the same check after other steps and gets
byte-identical output, again and again (issue 34 item 5). Pure: no I/O.

An agent that edits code and re-runs its test command, whose output does not change
by one byte however it edits, is often stuck; but healthy runs do it too (in the
recorded SWE-bench-style runs of issue 34, about 1 in 40 successful runs had 8 or more
such re-runs, against 1 in 9 failing runs). So this is a signal, ``warn`` by default
(:mod:`app.guard.strike_rules`): the model is told in-band, the task goes on.

Definition, on one conversation's completed calls (oldest first, as the detector sees
them): the *check* is the latest completed call's tool and canonical arguments. Going
back through the check's own earlier runs, a **re-run** is a run whose result hash
equals the latest one's and which came after at least one other completed call since
the check's previous run (an edit, a read, anything: a different step). The count is
the number of such re-runs in a row, back from the latest; it ends at a run with a
different result (the check's output changed: progress). Runs back to back, with no
other step between, are the identical-streak rule's (``repeated_tool_call``) and are
neither counted nor end the count. The signal fires when the count reaches the
threshold (``TASKGATE_NO_PROGRESS_RERUNS``, default 8; 0 off).

Results are compared after the result normaliser (:mod:`app.guard.normalize`), so
timings and ids that change on every run do not hide a stuck check; text actions
(mini-swe-agent's commands written as text, ``text:code``) are checks like any tool.

Cost: O(len(history)) time, O(1) memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.stop_reasons import NoProgressDetail

DEFAULT_NO_PROGRESS_RERUNS = 8


class Run(Protocol):
    """One completed call as this rule reads it (:class:`app.guard.detector.CallRecord`,
    which imports this module)."""

    @property
    def tool_name(self) -> str: ...

    @property
    def arguments_hash(self) -> str: ...

    @property
    def result_hash(self) -> str | None: ...


def unchanged_reruns(done: Sequence[Run]) -> int:
    """How many identical re-runs after other steps end ``done`` (completed calls,
    oldest first); see the module docstring. 0 when the history is empty."""
    if not done:
        return 0
    latest = done[-1]
    check = (latest.tool_name, latest.arguments_hash)
    result = latest.result_hash
    reruns = 0
    steps_since = 0  # other calls between this run of the check and the next one (later in time)
    for record in reversed(done[:-1]):
        if (record.tool_name, record.arguments_hash) != check:
            steps_since += 1
            continue
        if record.result_hash != result:
            break  # the check's output changed here: progress since
        if steps_since:
            reruns += 1
        steps_since = 0
    return reruns


def no_progress_detail(done: Sequence[Run], reruns: int, threshold: int) -> NoProgressDetail:
    """The verdict's evidence: the check's tool, hashes, the count and the threshold."""
    latest = done[-1]
    return NoProgressDetail(tool_name=latest.tool_name, arguments_hash=latest.arguments_hash,
                            result_hash=latest.result_hash, count=reruns, threshold=threshold)
