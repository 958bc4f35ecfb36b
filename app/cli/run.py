"""``taskgate run [limits] -- <agent command ...>``: run an agent under a fresh task.

Creates a task over the admin API, runs the command with ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` pointing at the
gateway with the task token (and ``TASKGATE_TASK_ID``), lets its output through as it
comes (the agent inherits the terminal), then prints the task's outcome on stderr
(status, the stop sentence the agent got, counters) and exits with
:data:`STOPPED_EXIT_STATUS` (4) when the task was stopped, whatever the agent's own status
(some agents exit 0 after any API error, e.g. Aider), else with the agent's exit status
(128 + N when a signal N ended it; 127 when the command cannot be started).

With a budget key (``--key`` or ``TASKGATE_BUDGET_KEY``) no task is created: the agent
gets the key as its API key and a run of its own, named ``--run NAME`` or else
:func:`default_run_name` (the command's name, the UTC time and 4 random hex: a new name,
so a new run and a new task from the key's template, at every invocation). The name
travels in the base URLs (``<gateway>/run/<name>/v1``, :mod:`app.proxy.run_path`), the
one thing every agent lets you set, and as ``TASKGATE_RUN``; the run's task is
``<budget>-run-<name>-<16 hex>`` (:func:`app.budgets.keys.run_task_id`). A key cannot
read its task, so this mode prints no outcome and exits with the agent's own status.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any, NoReturn

import click

from app.budgets.keys import RUN_NAME_PATTERN, is_budget_key
from app.cli.client import AdminClient, AdminError, connect, default_url
from app.cli.tasks import limit_options, limits_body
from app.proxy.run_path import PREFIX as RUN_PATH
from app.settings import Settings

#: ``taskgate run``'s exit status when its task was stopped (a wrapping script can tell).
STOPPED_EXIT_STATUS = 4


def agent_env(url: str, task_id: str, token: str) -> dict[str, str]:
    """The agent's environment: ours plus the four provider variables, the task id and the
    token again as ``TASKGATE_TOKEN`` (what an MCP client's configuration reads for
    ``/mcp/<server>``, docs/mcp.md: Claude Code will not send its own credential variables
    to a remote server)."""
    base = url.rstrip("/")
    return {**os.environ, "OPENAI_BASE_URL": base + "/v1", "OPENAI_API_KEY": token,
            "ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": token, "TASKGATE_TASK_ID": task_id,
            "TASKGATE_TOKEN": token}


def key_env(url: str, key: str, run: str) -> dict[str, str]:
    """The agent's environment for a run of budget key ``key``: ours plus the four
    provider variables, the base URLs naming the run (``<url>/run/<run>``), the key as
    ``TASKGATE_TOKEN`` and the run as ``TASKGATE_RUN`` (an MCP client sends both to
    ``/mcp/<server>``: the key and ``x-taskgate-run``); ``TASKGATE_TASK_ID`` removed (it
    would name some other task)."""
    base = url.rstrip("/") + RUN_PATH + run
    env = {**os.environ, "OPENAI_BASE_URL": base + "/v1", "OPENAI_API_KEY": key,
           "ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": key, "TASKGATE_TOKEN": key, "TASKGATE_RUN": run}
    env.pop("TASKGATE_TASK_ID", None)
    return env


def default_run_name(command: str, now: datetime | None = None) -> str:
    """A fresh run name for ``command`` (its program): ``<program>-<UTC time>-<4 hex>``,
    e.g. ``codex-20261204T104608Z-3f2a``; the program's name is cut to 24 characters of
    ``A-Za-z0-9._-`` (``run`` when none is left). The random part keeps two runs started
    in the same second apart. Always matches :data:`app.budgets.keys.RUN_NAME_PATTERN`."""
    program = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(command.rstrip("/")))
    program = program.lstrip("._-")[:24].rstrip("._-") or "run"
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{program}-{stamp}-{secrets.token_hex(2)}"


def outcome_lines(task: dict[str, Any]) -> list[str]:
    """What ``run`` prints about the task when the agent is done."""
    def of(used: Any, limit: Any) -> str:
        return f"{used}/{limit}" if limit is not None else str(used)

    counters = (f"requests {of(task['admitted_requests'], task['request_limit'])}, "
                f"tokens {of(task['total_tokens'], task['token_limit'])}, "
                f"tool calls {of(task['tool_calls'], task['tool_call_limit'])}")
    if task["status"] == "stopped":
        lines = [f"taskgate: task {task['id']} stopped ({task['stop_reason']}); {counters}"]
        if task.get("stop_message"):
            lines.append(f"taskgate: {task['stop_message']}")
        return lines
    return [f"taskgate: task {task['id']} active; {counters}"]


def remaining_line(task: dict[str, Any], chain: list[dict[str, Any]]) -> str | None:
    """What the task may still spend, as the ``x-taskgate-remaining-*`` headers say it: the
    least of the task's own room and each budget's of ``chain`` (admin API bodies) in its
    current window, and when the tightest budget's window resets. ``None`` for a stopped
    task: it has nothing left until an operator resumes it, whatever its counters say (the
    stop's own line says so)."""
    if task["status"] == "stopped":
        return None
    def least(values: list[Any]) -> Any:
        present = [v for v in values if v is not None]
        return max(0, min(present)) if present else None

    def left(limit: Any, used: Any) -> Any:
        return None if limit is None else limit - used

    requests = least([task["request_limit"] - task["admitted_requests"]]
                     + [left(b["request_limit"], b["current"]["admitted_requests"]) for b in chain])
    tokens = least([left(task["token_limit"], task["total_tokens"])]
                   + [left(b["token_limit"], b["current"]["total_tokens"]) for b in chain])
    usd = least([left(task.get("cost_limit_usd"), task.get("cost_usd", 0) + task.get("reserved_usd", 0))]
                + [left(b["cost_limit_usd"], b["current"]["cost_usd"] + b["current"]["reserved_usd"]) for b in chain])
    parts = [f"{requests} requests"] + ([f"{tokens} tokens"] if tokens is not None else []) \
        + ([f"${usd:.2f}"] if usd is not None else [])
    resets = sorted(b["current"]["resets_at"] for b in chain if b["current"].get("resets_at"))
    return "taskgate: remaining " + ", ".join(parts) + (f"; budget window resets at {resets[0]}" if resets else "")


def _chain(api: AdminClient, budget_id: str | None) -> list[dict[str, Any]]:
    """The task's budget and its ancestors (admin API bodies), at most 4."""
    chain: list[dict[str, Any]] = []
    while budget_id is not None and len(chain) < 4:
        chain.append(api.request("GET", f"/admin/budgets/{budget_id}"))
        budget_id = chain[-1].get("parent")
    return chain


def _start(command: tuple[str, ...], env: dict[str, str]) -> int:
    """Run ``command`` with ``env`` until it ends: its exit status (negative: the signal
    that ended it); exits 127 when it cannot be started. Ctrl-C reaches the agent (same
    process group) and we wait for it; our SIGTERM is passed on."""
    try:
        proc = subprocess.Popen(list(command), env=env)
    except OSError as exc:
        click.echo(f"taskgate: cannot start {command[0]}: {exc.strerror or exc}", err=True)
        sys.exit(127)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, _frame: proc.send_signal(signum))
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_with_key(key: str, run_name: str | None, url: str | None, command: tuple[str, ...]) -> NoReturn:
    """``taskgate run --key``: the agent as a run of the budget key (module docstring);
    exits with the agent's status."""
    if not is_budget_key(key):
        raise click.BadParameter("a budget key starts with tgk- (taskgate budgets key-create).",
                                 param_hint="'--key' / TASKGATE_BUDGET_KEY")
    if run_name is not None and not re.fullmatch(RUN_NAME_PATTERN, run_name):
        raise click.BadParameter("letters, digits, '.', '_' and '-', at most 128, starting with a letter or digit.",
                                 param_hint="'--run'")
    name = run_name or default_run_name(command[0])
    click.echo(f"taskgate: run {name} of a budget key (a task of its own, from the key's limits); "
               f"running {' '.join(command)}", err=True)
    code = _start(command, key_env(url or default_url(Settings()), key, name))
    sys.exit(code if code >= 0 else 128 - code)


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--id", "task_id", default=None, help="Id of the new task (generated when absent).")
@click.option("--budget", default=None, help="The budget the new task draws from.")
@limit_options
@click.option("--key", envvar="TASKGATE_BUDGET_KEY", default=None,
              help="A budget key (TASKGATE_BUDGET_KEY): no new task; the agent uses the key and is a run of "
                   "its own (a task from the key's limits). Not with --id, --budget or limits.")
@click.option("--run", "run_name", default=None,
              help="With --key: the run's name (default: the command's name, the UTC time and 4 random hex, "
                   "new every time). The same name again continues that run's task.")
@click.option("--url", envvar="TASKGATE_URL", default=None,
              help="Gateway URL (TASKGATE_URL; default the local gateway).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(task_id: str | None, budget: str | None, key: str | None, run_name: str | None, url: str | None,
        command: tuple[str, ...], **limits: Any) -> None:
    """Run an agent command under a new task; exits with 4 when the task was stopped,
    else with the agent's status. With --key (or TASKGATE_BUDGET_KEY), as a new run of
    a budget key instead.

    Example: taskgate run --request-limit 50 -- codex exec "fix the failing test"
    """
    if key:
        given = [f"--{name.replace('_', '-')}" for name, value in
                 {"id": task_id, "budget": budget, **limits}.items() if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: not with --key (the key's template sets the run's task; "
                                   "the key's budget is its budget).")
        _run_with_key(key, run_name, url, command)
    if run_name is not None:
        raise click.UsageError("--run names a run of a budget key: give --key (or TASKGATE_BUDGET_KEY) too.")
    api = connect(url)
    body = limits_body(**limits)
    if task_id:
        body["id"] = task_id
    if budget:
        body["budget"] = budget
    try:
        task = api.create(body)
    except AdminError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"taskgate: task {task['id']} (request limit {task['request_limit']}); "
               f"running {' '.join(command)}", err=True)
    code = _start(command, agent_env(api.url, task["id"], task["token"]))
    stopped = False
    try:
        outcome = api.task(task["id"])
        stopped = outcome["status"] == "stopped"
        for line in outcome_lines(outcome):
            click.echo(line, err=True)
        if (left := remaining_line(outcome, _chain(api, outcome.get("budget")))) is not None:
            click.echo(left, err=True)
    except AdminError as exc:
        click.echo(f"taskgate: cannot read task {task['id']}: {exc}", err=True)
    sys.exit(STOPPED_EXIT_STATUS if stopped else code if code >= 0 else 128 - code)
