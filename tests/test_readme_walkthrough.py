"""README's walkthrough against a real run, so its samples cannot go stale: the agent
script in README is run under ``taskgate run`` against a gateway and the mock upstream,
and what it prints is compared with README's output block (task ids, tokens and ports
aside); the same for ``taskgate tasks create`` and ``taskgate tasks list``, and for the
budget, its key and two runs through it (run names and hashes aside)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx

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


def _commands(block: str, budget: str) -> list[list[str]]:
    """The ``taskgate`` lines of a README bash block as argv (comments dropped), the
    budget renamed to ``budget``."""
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("taskgate ")]
    return [[budget if word == "team-a" else word for word in shlex.split(line)[1:]] for line in lines]


def test_walkthrough_budget_key_runs_match_a_real_run(gateway, tmp_path):
    """README's budget, key and two runs through it: the commands as README has them,
    two tasks each named after its run, and the table as README shows it."""
    budget = f"team-a-{os.getpid()}"
    names = r"python[\w.]*-\d{8}T\d{6}Z-[0-9a-f]{4}"

    def normal(text: str) -> list[str]:
        text = text.replace(budget, "team-a")
        text = re.sub(names, "python-TIME", text)
        text = re.sub(r"key_[0-9a-f]{16}", "key_ID", re.sub(r"tgk-[A-Za-z0-9_-]+", "tgk-KEY", text))
        return _normal(re.sub(r"-[0-9a-f]{16}\b", "-HASH", text), {})

    block = _block("taskgate budgets create --id team-a")
    create, key_create, *runs, listing = _commands(block, budget)
    assert _cli(gateway, *create).returncode == 0
    created = _cli(gateway, *key_create)
    assert created.returncode == 0, created.stderr
    assert "export TASKGATE_BUDGET_KEY=<the key shown>" in block
    shown_key = re.search(r"^key: (tgk-[A-Za-z0-9_-]+)  \(shown only once\)$", created.stdout, re.M)
    assert shown_key, created.stdout
    key = shown_key.group(1)

    (tmp_path / "agent.py").write_text(_block("import openai  # reads OPENAI_BASE_URL"))
    shown_runs = [line.split("  # ", 1)[1] for line in block.splitlines() if line.startswith("taskgate run")]
    assert len(runs) == 2 and runs[0] == runs[1] == ["run", "--", "python", "agent.py"]
    started = []
    for argv, shown in zip(runs, shown_runs):  # python: this interpreter
        p = subprocess.run([sys.executable, "-m", "app.cli", *argv[:-2], sys.executable, "agent.py"], cwd=tmp_path,
                           env={**os.environ, "TASKGATE_URL": gateway.url, "TASKGATE_BUDGET_KEY": key},
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert p.stdout.count("turn ") == 5
        assert normal(p.stderr)[0].startswith(normal(shown)[0].removesuffix("(...)")), (p.stderr, shown)
        started.append(re.search(names, p.stderr).group(0))  # type: ignore[union-attr]
    table = _cli(gateway, *listing)
    assert table.returncode == 0, table.stderr
    rows = table.stdout.strip().splitlines()[1:]
    assert sorted(row.split()[0] for row in rows) == sorted(
        t["id"] for t in _api_tasks(gateway, budget)) and len(rows) == 2
    assert all(any(row.split()[0].startswith(f"{budget}-run-{name}-") for row in rows) for name in started)
    squeeze = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731 - column widths follow the ids
    shown_table = normal(_block(" id                                                        status"))
    assert [squeeze(line) for line in normal(table.stdout)] == [squeeze(line) for line in shown_table]

    # README's last words: the key as OPENAI_API_KEY and the same agent twice is one task
    merged = f"{budget}-merged"
    assert _cli(gateway, "budgets", "create", "--id", merged).returncode == 0
    other = re.search(r"tgk-[A-Za-z0-9_-]+", _cli(gateway, *key_create[:2], merged, *key_create[3:]).stdout)
    assert other
    env = {**os.environ, "OPENAI_BASE_URL": gateway.url + "/v1", "OPENAI_API_KEY": other.group(0)}
    for _ in range(2):
        assert subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, env=env, capture_output=True,
                              timeout=120).returncode == 0
    assert [(t["admitted_requests"], t["request_limit"]) for t in _api_tasks(gateway, merged)] == [(10, 10)]


def _api_tasks(gateway, budget: str) -> list[dict]:
    r = httpx.get(gateway.url + "/admin/tasks", params={"budget": budget}, timeout=30,
                  headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert r.status_code == 200, r.text
    return r.json()["data"]
