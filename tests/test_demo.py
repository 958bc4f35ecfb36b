"""``taskgate demo`` (a real process, as a new user runs it) prints README's transcript
and nothing else: no log lines, no stop detail; ``--verbose`` adds both.

The transcript is compared line by line, ports and numbers aside; README abridges with
``...`` (the line before it repeated) and a line ending in `` ...`` (the rest of that
line); a refusal wrapped over several lines is compared as one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
TRANSCRIPT = next(b for b in re.findall(r"```[a-z]*\n(.*?)```", README, re.S) if b.startswith("upstream: a scripted"))
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR) ", re.M)


def _demo(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TASKGATE_DATABASE_URL"} | {"COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "app.cli", "demo", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=180, env=env)  # as a terminal shows both


def _lines(text: str) -> list[str]:
    """Lines with ports and numbers replaced, wrapped continuation lines joined."""
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    text = re.sub(r"\d+", "N", text)
    out: list[str] = []
    for line in text.rstrip().splitlines():
        if line.startswith("         ") and out:  # the refusal's continuation, indented under its text
            out[-1] += " " + line.strip()
        else:
            out.append(line.rstrip())
    return out


def matches(shown: list[str], real: list[str]) -> bool:
    """Whether ``real`` is what README ``shown`` says: equal lines, ``...`` standing for any
    number of repeats of the line before it, a line ending in `` ...`` for its prefix."""
    i = 0
    for n, line in enumerate(shown):
        if line == "...":  # the repeats, but those the lines after it show
            end = i
            while end < len(real) and real[end] == shown[n - 1]:
                end += 1
            after = 0
            while n + 1 + after < len(shown) and shown[n + 1 + after] == shown[n - 1]:
                after += 1
            i = max(i, end - after)
            continue
        if i >= len(real):
            return False
        if line.endswith(" ...") and line != real[i]:
            if not real[i].startswith(line.removesuffix("...")):
                return False
        elif line != real[i]:
            return False
        i += 1
    return i == len(real)


def test_matches_abridges_only_what_readme_says() -> None:
    shown = ["a", "t N", "...", "t N", "x y ...", "end"]
    assert matches(shown, ["a", "t N", "t N", "t N", "t N", "x y z", "end"])
    assert not matches(shown, ["a", "t N", "log line", "t N", "x y z", "end"])
    assert not matches(shown, ["a", "t N", "t N", "x y z", "end", "extra"])
    assert not matches(shown, ["a", "t N", "t N", "x q", "end"])


def test_demo_prints_readme_transcript_and_nothing_else() -> None:
    run = _demo()
    assert run.returncode == 0, run.stdout
    assert not LOG_LINE.search(run.stdout), run.stdout
    assert "stop_detail" not in run.stdout and "arguments_hash" not in run.stdout
    real, shown = _lines(run.stdout), _lines(TRANSCRIPT)
    assert matches(shown, real), "\n".join(["README:", *shown, "", "real:", *real])
    assert "turn  6: refused by taskgate (HTTP 400)" in run.stdout


def test_verbose_adds_the_logs_and_the_stop_detail() -> None:
    run = _demo("--verbose", "--max-turns", "10")
    assert run.returncode == 0, run.stdout
    assert LOG_LINE.search(run.stdout) and "task demo-task stopped: repeated_tool_call" in run.stdout
    assert "stop_detail: {" in run.stdout and '"arguments_hash":' in run.stdout
    assert "upstream saw 5 requests" in run.stdout


def test_the_mcp_demo_stops_a_tool_loop_and_the_model_with_it() -> None:
    """``taskgate demo --mcp``: an agent on the mcp SDK calls the same grep through /mcp;
    the 6th call is refused with the stop sentence and never reaches the MCP server, and
    the task's model call is refused too. The story only (no log lines)."""
    run = _demo("--mcp")
    assert run.returncode == 0, run.stdout
    lines = run.stdout.splitlines()
    assert sum(line.startswith("call ") and "→ ''" in line for line in lines) == 5
    assert any(line.startswith("call  6: refused by taskgate (JSON-RPC -32001): Task 'demo-mcp-task' is stopped")
               for line in lines)
    assert "model call: refused too (HTTP 400): one latch for tools and tokens" in lines
    assert "task demo-mcp-task: status=stopped stop_reason=repeated_tool_call tool_calls=5" in lines
    assert lines[-1] == "MCP server ran 5 calls; the refused one never reached it."
    assert "INFO" not in run.stdout
