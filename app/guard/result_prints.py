"""Tool-result fingerprints, bounded and computed before admission, off the event loop.

What the ledger stores for one tool result (:class:`ResultPrint`): the hash the
detector compares, the failure and empty flags, optionally the raw text's hash. They
depend on the task's loop-guard configuration only (:class:`PrintConfig`), never on
the ledger, so the proxy computes them *before* admission (from the task row it looked
up, :func:`config_for`), outside the task's row lock, and in a worker thread when the results are large
(:data:`INLINE_BYTES`). Admission then only writes them.

The guard reads a bounded part of each result: ``scan_bytes``
(``TASKGATE_GUARD_RESULT_SCAN_BYTES``, default 64 KiB). A result up to that size is
normalised and classified whole. A longer one is cut at character boundaries into a
head and a tail of ``scan_bytes / 2`` each and the middle between them; its hash is
SHA-256 of ``bounded:`` + the normalised head + SHA-256 of the middle's raw bytes + the
normalised tail, so every byte still counts (two results differing anywhere differ)
while only head and tail have their volatile parts masked; failure patterns are
searched in head and tail; a result that long is never "empty". Lone surrogates (JSON
allows ``"\\ud800"``) are hashed as sent but read by the regexes as U+FFFD. Everything here is
pure except the thread hop of :func:`fingerprints_off_loop`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from app.db.bounds import ledger_text
from app.guard.fingerprint import (
    DEFAULT_EMPTY_RESULT_PATTERNS,
    DEFAULT_ERROR_PATTERNS,
    arguments_hash,
    compile_patterns,
    is_empty_result,
    is_failure,
    result_hash,
)
from app.guard.linear_regex import LinearPattern
from app.guard.normalize import Normalizer
from app.guard.policy import Policy
from app.settings import Settings
from app.task import Task
from app.wire.base import ToolCall, ToolResult

#: Results totalling more UTF-8 bytes than this (with the tool calls' arguments) are
#: fingerprinted in a worker thread; RE2 and SHA-256 release the GIL while they run.
INLINE_BYTES = 32 * 1024
_T = TypeVar("_T")
#: Prefix of the hashed material of a result longer than the scan bound.
BOUNDED_PREFIX = "bounded:"


@dataclass(frozen=True, slots=True)
class ResultPrint:
    """What the ledger stores for one tool result (``call_id`` as the ledger keys it)."""

    call_id: str
    result_hash: str
    is_error: bool
    is_empty: bool
    raw_hash: str | None


@dataclass(frozen=True, slots=True)
class PrintConfig:
    """Everything a result's fingerprint depends on: the normaliser in force, the
    failure and empty-result patterns, the scan bound (bytes) and whether the raw
    text's hash is kept."""

    normalizer: Normalizer
    error_patterns: tuple[LinearPattern, ...]
    empty_patterns: tuple[LinearPattern, ...]
    scan_bytes: int
    raw_hash: bool


@dataclass(frozen=True, slots=True)
class RequestPrints:
    """A request's result fingerprints and argument hashes, and the configuration they
    were computed under (the ledger recomputes when the locked task's differs)."""

    config: PrintConfig
    results: tuple[ResultPrint, ...]
    arguments: tuple[str, ...]


@lru_cache(maxsize=8)
def _patterns(patterns: tuple[str, ...] | None, defaults: tuple[str, ...]) -> tuple[LinearPattern, ...]:
    return compile_patterns(list(patterns if patterns is not None else defaults))


def config_for(task: Task, settings: Settings) -> PrintConfig:
    """The fingerprint configuration in force for ``task`` (its ``loop_guard``
    overrides on top of the settings, :class:`app.guard.policy.Policy`)."""
    return PrintConfig(
        normalizer=Policy(task, settings).normalizer,
        error_patterns=_patterns(settings.error_patterns, DEFAULT_ERROR_PATTERNS),
        empty_patterns=_patterns(settings.empty_result_patterns, DEFAULT_EMPTY_RESULT_PATTERNS),
        scan_bytes=settings.guard_result_scan_bytes,
        raw_hash=settings.ledger_raw_result_hash,
    )


def _cut(data: bytes, scan_bytes: int) -> tuple[int, int]:
    """Byte offsets ``(head_end, tail_start)`` of a text longer than ``scan_bytes``,
    moved to UTF-8 character boundaries (never splitting a character)."""
    head_end, tail_start = scan_bytes // 2, len(data) - scan_bytes // 2
    while head_end > 0 and data[head_end] & 0xC0 == 0x80:
        head_end -= 1
    while tail_start < len(data) and data[tail_start] & 0xC0 == 0x80:
        tail_start += 1
    return head_end, tail_start


def _encoded(text: str) -> tuple[bytes, str]:
    """The UTF-8 bytes that are hashed (lone surrogates kept, ``surrogatepass``) and the
    text the regexes read (each lone surrogate as U+FFFD: RE2 reads valid UTF-8 only)."""
    try:
        return text.encode("utf-8"), text
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
        return data, data.decode("utf-8", "replace")


def fingerprint(result: ToolResult, config: PrintConfig) -> ResultPrint:
    """The fingerprint of one tool result under ``config`` (see the module docstring).
    CPU cost is bounded by ``config.scan_bytes`` for the regexes, linear in the
    result's size for hashing."""
    call_id = ledger_text(result.call_id)
    data, text = _encoded(result.output)
    raw = hashlib.sha256(data).hexdigest() if config.raw_hash else None
    if len(data) <= config.scan_bytes:
        normalized = config.normalizer(text)
        return ResultPrint(call_id, result_hash(normalized), is_failure(result, config.error_patterns, (text,)),
                           is_empty_result(normalized, config.empty_patterns), raw)
    head_end, tail_start = _cut(data, config.scan_bytes)
    head = data[:head_end].decode("utf-8", "replace")
    tail = data[tail_start:].decode("utf-8", "replace")
    middle = hashlib.sha256(memoryview(data)[head_end:tail_start]).hexdigest()
    material = f"{BOUNDED_PREFIX}{config.normalizer(head)}\x00{middle}\x00{config.normalizer(tail)}"
    return ResultPrint(call_id, result_hash(material), is_failure(result, config.error_patterns, (head, tail)),
                       False, raw)


def fingerprints(calls: Sequence[ToolCall], results: Sequence[ToolResult], config: PrintConfig) -> RequestPrints:
    """Fingerprints of a request's results and hashes of its tool calls' arguments."""
    return RequestPrints(config, tuple(fingerprint(r, config) for r in results),
                         tuple(arguments_hash(c.arguments) for c in calls))


def _size(calls: Sequence[ToolCall], results: Sequence[ToolResult]) -> int:
    """Characters to be read (an upper bound of the work; arguments objects count as
    small, they were parsed from the bounded body)."""
    return sum(len(r.output) for r in results) + sum(len(c.arguments) for c in calls
                                                     if isinstance(c.arguments, str))


async def off_loop_when_large(work: Callable[[], _T], chars: int) -> _T:
    """``work()`` here when ``chars`` (the characters it reads) is at most
    :data:`INLINE_BYTES`, else in a worker thread: the guard's one rule for what may run
    on the event loop."""
    return work() if chars <= INLINE_BYTES else await asyncio.to_thread(work)


async def fingerprints_off_loop(calls: Sequence[ToolCall], results: Sequence[ToolResult],
                                config: PrintConfig) -> RequestPrints:
    """:func:`fingerprints`, in a worker thread when the input exceeds :data:`INLINE_BYTES`."""
    return await off_loop_when_large(lambda: fingerprints(calls, results, config), _size(calls, results))
