"""``taskgate run [limits] -- <agent command ...>``: run an agent under a fresh task.

Creates a task over the admin API, runs the command with ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` pointing at the
gateway with the task token (and ``TASKGATE_TASK_ID``), lets its output through as it
comes (the agent inherits the terminal), then prints the task's outcome on stderr
(status, the stop sentence the agent got, counters) and exits with
:data:`STOPPED_EXIT_STATUS` (4) when the task was stopped, whatever the agent's own status
(some agents exit 0 after any API error, e.g. Aider), else with the agent's exit status
(128 + N when a signal N ended it; 127 when the command cannot be started).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import click

from app.cli.client import AdminError, connect
from app.cli.tasks import limit_options, limits_body

#: ``taskgate run``'s exit status when its task was stopped (a wrapping script can tell).
STOPPED_EXIT_STATUS = 4


def agent_env(url: str, task_id: str, token: str) -> dict[str, str]:
    """The agent's environment: ours plus the four provider variables and the task id."""
    base = url.rstrip("/")
    return {**os.environ, "OPENAI_BASE_URL": base + "/v1", "OPENAI_API_KEY": token,
            "ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": token, "TASKGATE_TASK_ID": task_id}


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


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--id", "task_id", default=None, help="Id of the new task (generated when absent).")
@click.option("--budget", default=None, help="The budget the new task draws from.")
@limit_options
@click.option("--url", envvar="TASKGATE_URL", default=None,
              help="Gateway URL (TASKGATE_URL; default the local gateway).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(task_id: str | None, budget: str | None, url: str | None, command: tuple[str, ...], **limits: Any) -> None:
    """Run an agent command under a new task; exits with 4 when the task was stopped,
    else with the agent's status.

    Example: taskgate run --request-limit 50 -- codex exec "fix the failing test"
    """
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
    try:
        proc = subprocess.Popen(list(command), env=agent_env(api.url, task["id"], task["token"]))
    except OSError as exc:
        click.echo(f"taskgate: cannot start {command[0]}: {exc.strerror or exc}", err=True)
        sys.exit(127)
    # Ctrl-C reaches the agent (same process group); we wait for it to finish.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, _frame: proc.send_signal(signum))
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    stopped = False
    try:
        outcome = api.task(task["id"])
        stopped = outcome["status"] == "stopped"
        for line in outcome_lines(outcome):
            click.echo(line, err=True)
    except AdminError as exc:
        click.echo(f"taskgate: cannot read task {task['id']}: {exc}", err=True)
    sys.exit(STOPPED_EXIT_STATUS if stopped else code if code >= 0 else 128 - code)
