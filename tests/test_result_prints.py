"""Bounded tool-result fingerprints (app/guard/result_prints.py): pure, no database."""

from __future__ import annotations

import asyncio

from app.guard.result_prints import config_for, fingerprint, fingerprints, fingerprints_off_loop
from app.settings import Settings
from app.wire.base import ToolCall, ToolResult
from tests.task_values import task_value

TASK = task_value()

CONFIG = config_for(TASK, Settings(guard_result_scan_bytes=1024))
FILLER = "line of a long file\n" * 500  # 10 kB: past the 1 KiB bound


def _hash(text: str) -> str:
    return fingerprint(ToolResult("c", text), CONFIG).result_hash


def test_head_and_tail_are_normalised_the_middle_counts_raw():
    a = "at 06:54:12\n" + FILLER + "done 2026-12-01T06:55:01Z"
    b = "at 07:00:59\n" + FILLER + "done 2026-12-02T08:00:00Z"
    assert _hash(a) == _hash(b)  # the clocks in head and tail are masked
    middle = len(a) // 2
    assert _hash(a) != _hash(a[:middle] + "X" + a[middle + 1:])  # every byte counts
    assert _hash(a) != _hash(a + "!")


def test_small_results_are_fingerprinted_as_before():
    small = config_for(TASK, Settings())
    assert fingerprint(ToolResult("c", "x 06:54:12"), small).result_hash == \
        fingerprint(ToolResult("c", "x 07:00:00"), small).result_hash
    assert fingerprint(ToolResult("c", "[]"), small).is_empty


def test_cut_never_splits_a_character():
    text = "é" * 5000  # two bytes each: 512 is a boundary, 513 would not be
    assert _hash(text) == _hash(text)
    assert _hash(text) != _hash("é" * 4999 + "e")
    assert _hash("\ud800" + FILLER + "\udfff")  # lone surrogates hash, never raise


def test_failure_patterns_are_searched_in_head_and_tail_and_the_flag_wins():
    assert fingerprint(ToolResult("c", "Error: boom\n" + FILLER), CONFIG).is_error
    assert fingerprint(ToolResult("c", FILLER + "Traceback (most recent call last):"), CONFIG).is_error
    assert not fingerprint(ToolResult("c", FILLER + "permission denied" + FILLER), CONFIG).is_error
    assert not fingerprint(ToolResult("c", "Error: boom\n" + FILLER, is_error=False), CONFIG).is_error


def test_off_loop_gives_the_inline_answer():
    calls = [ToolCall("c", "read_file", '{"b": 1, "a": 2}')]
    results = [ToolResult("c", FILLER * 10)]
    inline = fingerprints(calls, results, CONFIG)
    assert asyncio.run(fingerprints_off_loop(calls, results, CONFIG)) == inline


def test_failure_patterns_keep_their_flags_when_searched_at_once():
    """The failure patterns are case-insensitive and one is anchored at the start of the
    text: searched as one combined pattern, both still hold."""
    small = config_for(TASK, Settings())
    assert fingerprint(ToolResult("c", "cat: x: NO SUCH FILE OR DIRECTORY"), small).is_error
    assert fingerprint(ToolResult("c", "  FATAL: disk full"), small).is_error
    assert not fingerprint(ToolResult("c", "ok\nerror: only at the start of the text counts"), small).is_error
