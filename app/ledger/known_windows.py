"""Conversations' history windows as this process last saw them, and the window a
turn will leave: a cache, never the truth.

Every statement that writes a conversation's ledger and reads its window back (a
response's tool calls, ``taskgate_record_response()``; an agent turn,
``taskgate_agent_turn()``) leaves here the window it returned (:func:`put`). The next
agent turn on that conversation predicts the window after its own writes
(:func:`predict`, pure), the detector judges the prediction, and admission sends one
statement that holds the task's row lock, checks the window is still the cached one and
writes only then (:mod:`app.admission.known_turn`, migration 0013). An entry another
process or a concurrent turn made stale costs that check, never a wrong verdict.

Bounded: at most :data:`MAX_ENTRIES` conversations (cleared when full, as the other
per-process caches are).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from app.guard.detector import CallRecord
from app.ledger.rows import CallColumns, ResultColumns

MAX_ENTRIES = 10_000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Window:
    """A conversation's most recent ledger records, oldest first, as read with
    ``LIMIT size`` (fewer records than ``size``: the whole conversation)."""

    size: int
    records: tuple[CallRecord, ...]

    def last(self, size: int) -> tuple[CallRecord, ...] | None:
        """The window ``LIMIT size`` would read, or ``None`` when this one is too short
        to tell."""
        if size > self.size and len(self.records) == self.size:
            return None
        return self.records[-size:]


@dataclass(frozen=True, slots=True)
class Prediction:
    """What a turn's writes will do: the window after them (``LIMIT size``, oldest
    first), the calls new to the ledger and the results that complete a call, and the
    request's columns without the rows the window shows are no-ops (calls already in
    it, results of its completed calls): what the statement still has to send."""

    window: tuple[CallRecord, ...]
    new_calls: int
    completed: int
    calls: CallColumns
    results: ResultColumns


_windows: dict[tuple[str, str], Window] = {}


def put(task_id: str, conversation_key: str, size: int, records: Sequence[CallRecord]) -> None:
    """Keep the window a statement just returned for the conversation."""
    if len(_windows) >= MAX_ENTRIES:
        _windows.clear()
    _windows[(task_id, conversation_key)] = Window(size, tuple(records))


def get(task_id: str, conversation_key: str) -> Window | None:
    """The conversation's window as last seen here (``None``: not seen)."""
    return _windows.get((task_id, conversation_key))


def drop(task_id: str, conversation_key: str) -> None:
    """Forget a conversation's window (it was found stale)."""
    _windows.pop((task_id, conversation_key), None)


def forget() -> None:
    """Forget every window (tests)."""
    _windows.clear()


def digest(records: Sequence[CallRecord]) -> bytes:
    """SHA-256 of a window's call ids and result hashes, oldest first: per record
    ``len(id):id:len(result):result`` (``-`` for a pending result), joined by ``;``,
    UTF-8; what ``taskgate_known_turn()`` computes from the ledger (migration 0013)."""
    parts = []
    for r in records:  # a loop, not a generator: ~20% less per 64-record window
        call_id, result = r.call_id, r.result_hash
        parts.append(f"{len(call_id)}:{call_id}:-" if result is None
                     else f"{len(call_id)}:{call_id}:{len(result)}:{result}")
    return hashlib.sha256(";".join(parts).encode()).digest()


def _kept(values: list[T], keep: list[bool]) -> list[T]:
    return [v for v, k in zip(values, keep) if k]


def predict(before: Sequence[CallRecord], size: int, calls: CallColumns,
            results: ResultColumns) -> Prediction | None:
    """The window a turn leaves when the ledger's last ``size`` records of its
    conversation are ``before`` (oldest first), as ``taskgate_agent_turn()`` writes:

    - a call whose id is not in ``before`` is new: appended in request order, with its
      result when the request carries one (pending otherwise);
    - a pending record of ``before`` whose id has a result is completed with it;
    - ``completed`` counts both kinds.

    A call already in the ledger but older than ``before`` is predicted new; the
    statement that checks the prediction finds that out (its counts differ). ``None``
    when the statement's writes would not be determined by the request alone: repeated
    call ids, or two results for one id."""
    call_ids, names, arguments, previews = calls
    result_ids, hashes, errors, empties, raw_hashes = results
    if len(set(call_ids)) != len(call_ids) or len(set(result_ids)) != len(result_ids):
        return None
    outcome = {i: (h, e, m) for i, h, e, m in zip(result_ids, hashes, errors, empties)}
    # ``result_hash is not None`` is CallRecord.completed without a property call per record
    seen = {r.call_id: r.result_hash is not None for r in before}
    completed = 0
    window: list[CallRecord] = list(before)
    if outcome:
        for n, record in enumerate(before):
            if record.result_hash is None and (result := outcome.get(record.call_id)) is not None:
                completed += 1
                window[n] = CallRecord(record.call_id, record.tool_name, record.arguments_hash, *result)
    new_calls = 0
    for call_id, name, arguments_hash in zip(call_ids, names, arguments):
        if call_id in seen:
            continue
        new_calls += 1
        result = outcome.get(call_id)
        if result is None:
            window.append(CallRecord(call_id, name, arguments_hash, None, None))
        else:
            completed += 1
            window.append(CallRecord(call_id, name, arguments_hash, *result))
    k = [i not in seen for i in call_ids]
    send_calls = (_kept(call_ids, k), _kept(names, k), _kept(arguments, k), _kept(previews, k))
    k = [not seen.get(i, False) for i in result_ids]
    send_results = (_kept(result_ids, k), _kept(hashes, k), _kept(errors, k), _kept(empties, k), _kept(raw_hashes, k))
    return Prediction(tuple(window[-size:]), new_calls, completed, send_calls, send_results)
