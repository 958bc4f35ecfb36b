"""README's walkthrough against a real run, so its samples cannot go stale: the agent
script in README is run under ``taskgate run`` against a gateway and the mock upstream,
and what it prints is compared with README's output block (task ids, tokens and ports
aside); the same for ``taskgate tasks create`` and ``taskgate tasks list``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ADMIN_TOKEN

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```[a-z]*\n(.*?)```", README, re.S)


def _block(starting: str) -> str:
    return next(b for b in BLOCKS if b.startswith(starting))


def _cli(gateway, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TASKGATE_URL": gateway.url, "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _normal(text: str, ids: dict[str, str]) -> list[str]:
    for real, shown in ids.items():
        text = text.replace(real, shown)
    text = re.sub(r"tg-[A-Za-z0-9_-]+", "tg-TOKEN", text)
    text = re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:PORT", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def test_walkthrough_outputs_match_a_real_run(gateway, tmp_path):
    suffix = f"-{os.getpid()}"
    ids = {f"fix-bug-42{suffix}": "fix-bug-42", f"fix-bug-7{suffix}": "fix-bug-7"}
    created = _cli(gateway, "tasks", "create", "--id", f"fix-bug-42{suffix}", "--request-limit", "3")
    assert created.returncode == 0, created.stderr
    shown = _block("created task fix-bug-42")
    assert _normal(created.stdout, ids) == _normal(shown, ids)

    (tmp_path / "agent.py").write_text(_block("import openai  # reads OPENAI_BASE_URL"))
    run = _cli(gateway, "run", "--id", f"fix-bug-7{suffix}", "--request-limit", "3", "--", sys.executable,
               "agent.py", cwd=tmp_path)
    shown = _normal(_block("taskgate: task fix-bug-7 (request limit 3)"), ids)
    status = next(line for line in shown if line.startswith("exit status "))
    assert run.returncode == int(status.split()[-1]), run.stderr
    real = _normal(re.sub(r"running \S+ agent\.py", "running python agent.py", run.stderr) + "\n" + run.stdout, ids)
    # README abridges the traceback to its first and last lines
    expected = [line for line in shown if line not in ("  ...", status)]
    for line in expected:
        if line.startswith("Traceback") or line.endswith(": ..."):
            prefix = line.removesuffix("...")
            assert any(r.startswith(prefix) for r in real), (line, real)
        else:
            assert line in real, (line, real)

    assert _cli(gateway, "tasks", "update", f"fix-bug-7{suffix}", "--request-limit", "10").returncode == 0
    assert _cli(gateway, "tasks", "resume", f"fix-bug-7{suffix}", "--reason", "reviewed").returncode == 0
    table = _normal(_cli(gateway, "tasks", "list").stdout, ids)
    squeeze = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731 - column widths follow the other rows
    shown_table = _normal(_block(" id          status"), ids)
    assert squeeze(shown_table[0]) == squeeze(table[0])  # the header
    for line in shown_table[1:]:
        assert any(squeeze(line) == squeeze(r) for r in table), (line, table)
