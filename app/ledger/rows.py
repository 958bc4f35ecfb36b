"""The ledger's rows, as the statements take and give them: pure conversions between a
request's tool calls, their fingerprints and the history window on one side and the
array columns of the ledger's statements and functions (migrations 0009, 0011, 0012)
on the other. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.db.bounds import ledger_text, storable_json
from app.guard.detector import CallRecord
from app.guard.fingerprint import arguments_hash
from app.guard.preview import argument_preview
from app.guard.result_prints import RequestPrints
from app.wire.base import ToolCall

#: The ledger's columns of a request's tool calls (ids, tool names, arguments hashes,
#: previews) and of its results (call ids, result hashes, failure flags, empty flags, raw
#: hashes), as :func:`call_rows` / :func:`result_rows` give them.
CallColumns = tuple[list[str], list[str], list[str], list[str | None]]
ResultColumns = tuple[list[str], list[str], list[bool], list[bool], list[str | None]]


def call_rows(calls: Sequence[ToolCall], hashes: Sequence[str] | None, preview_chars: int) -> CallColumns:
    """The ledger's columns for ``calls`` (call ids, tool names, arguments hashes,
    argument previews), as the batch insert takes them."""
    return ([ledger_text(c.call_id) for c in calls], [ledger_text(c.name) for c in calls],
            list(hashes) if hashes is not None else [arguments_hash(c.arguments) for c in calls],
            [storable_json(argument_preview(c.arguments, preview_chars)) for c in calls])


def result_rows(prints: RequestPrints) -> ResultColumns:
    """The ledger's result columns for a request's fingerprints (call ids, result hashes,
    failure flags, empty flags, raw hashes), as the batch completion takes them."""
    p = prints.results
    return ([r.call_id for r in p], [r.result_hash for r in p], [r.is_error for r in p],
            [r.is_empty for r in p], [r.raw_hash for r in p])


def window_records(row: Mapping[str, Any]) -> list[CallRecord]:
    """The history window of a row with the functions' window columns (``window_ids``,
    ``window_names``, ``window_arguments``, ``window_results``, ``window_errors``,
    ``window_empty``: one array per :class:`CallRecord` field, as the statements of
    ``app/db/sql/`` select them), oldest first (empty when the function returned none)."""
    if row["window_ids"] is None:
        return []
    return [CallRecord(*r) for r in zip(row["window_ids"], row["window_names"], row["window_arguments"],
                                        row["window_results"], row["window_errors"], row["window_empty"])]
