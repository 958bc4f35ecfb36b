"""The recorded runs shipped in bench/recordings (format: bench/recordings/README.md):
each file is well formed, and the turns its header names as repeating themselves inside
one answer are exactly those app.guard.repeated_output stops, however the answer is split
(issue 34: the 64-digit number of a healthy run is not one of them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.guard.repeated_output import OutputMonitor

RECORDINGS = sorted((Path(__file__).resolve().parent.parent / "bench" / "recordings").glob("*.jsonl"))
HEADER_KEYS = {"format", "run", "agent", "actions", "outcome", "note", "system", "user", "expect"}


def load(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    header, *turns = (json.loads(line) for line in path.read_text().splitlines())
    return header, turns


def test_the_four_runs_of_issue_34_are_shipped() -> None:
    assert [p.stem for p in RECORDINGS] == ["chant-recovers", "edit-rerun", "long-number", "one-piece-chant"]


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_a_recording_is_well_formed(path: Path) -> None:
    header, turns = load(path)
    assert set(header) == HEADER_KEYS and header["format"] == "taskgate-run/1" and header["run"] == path.stem
    assert header["actions"] in ("tool_calls", "text") and header["outcome"] in ("solved", "failed")
    assert set(header["expect"]) == {"stop_turn", "stop_reason", "repeated_output_turns"}
    assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1))
    for t in turns[:-1]:
        assert set(t) <= {"turn", "stream", "assistant", "results", "user"} and isinstance(t["stream"], bool)
        calls = t["assistant"].get("tool_calls") or []
        assert [r["tool_call_id"] for r in t.get("results", [])] == [c["id"] for c in calls]
        assert calls or "user" in t  # the next request carries something new
        if header["actions"] == "text":
            assert not calls
    assert "results" not in turns[-1] and "user" not in turns[-1]
    ids = [c["id"] for t in turns for c in t["assistant"].get("tool_calls") or []]
    assert len(ids) == len(set(ids))


def repeating(text: str, step: int) -> bool:
    m = OutputMonitor()
    return any(m.feed(text[i:i + step]) for i in range(0, len(text), step))


@pytest.mark.parametrize("step", [4, 16, 10**9])
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_the_turns_that_repeat_themselves_are_the_expected_ones(path: Path, step: int) -> None:
    header, turns = load(path)
    found = [t["turn"] for t in turns if repeating(t["assistant"]["text"], step)]
    assert found == header["expect"]["repeated_output_turns"]


def test_the_long_number_run_quotes_the_number_of_issue_34() -> None:
    _, turns = load(next(p for p in RECORDINGS if p.stem == "long-number"))
    number = "77.33333333333333333333333333333333333333333333333333333333333333"
    assert [t["turn"] for t in turns if number in t["assistant"]["text"]] == [12, 13]
