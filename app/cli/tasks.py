"""``taskgate tasks ...``: manage tasks over the admin API.

Every command takes ``--url`` (``TASKGATE_URL``; default the local gateway) and reads the
admin token from ``TASKGATE_ADMIN_TOKEN`` (or the local embedded default's token file).
Tables by default, ``--json`` for scripts; an error is one line with the API's message
and exit status 1.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import click

from app.cli import render
from app.cli.client import AdminClient, AdminError, connect
from app.cli.help import FullHelpGroup

#: A command function the option decorators wrap (click returns it unchanged).
Command = TypeVar("Command", bound=Callable[..., Any])


class OptionalNumber(click.ParamType[float | str | None]):
    """A number (``kind``: ``int`` or ``float``), or ``none`` to remove a limit."""

    name = "number|none"

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | str | None:
        if value is None or isinstance(value, (int, float)):
            return value
        if str(value).lower() in ("none", "null", "off"):
            return "none"
        try:
            return self.kind(value)
        except ValueError:
            self.fail(f"{value!r} is not a {self.kind.__name__} (or 'none')", param, ctx)


def _limit_options(fn: Command, none_means: str) -> Command:
    """The limit options (units in the names); ``none_means`` says what the value
    ``none`` does."""
    for name, kind, help_ in reversed((
        ("--request-limit", int, "Admitted requests allowed."),
        ("--token-limit", int, "Input + output tokens reported by upstream."),
        ("--max-duration", float, "Seconds from the first admitted request."),
        ("--tool-call-limit", int, "Tool calls of the whole task."),
        ("--max-stalls", int, "Stream stalls before the task stops."),
        ("--cost-limit", float, "Dollar ceiling (US dollars)."),
        ("--cost-wait", float, "Seconds a request waits for reservations in flight to settle."),
    )):
        if name == "--request-limit":  # every task has one
            tail = "(cannot be removed)." if "removes" in none_means else "(default TASKGATE_DEFAULT_REQUEST_LIMIT)."
            help_ = help_.removesuffix(".") + " " + tail
        elif name == "--cost-wait":  # no value of its own: the setting's
            help_ = help_ + (" 'none' removes the task's own, then TASKGATE_COST_WAIT_S applies."
                             if "removes" in none_means else " Absent or 'none': TASKGATE_COST_WAIT_S.")
        else:
            help_ = f"{help_} {none_means}"
        fn = click.option(name, type=OptionalNumber(kind), default=None, help=help_)(fn)
    return fn


def limit_options(fn: Command) -> Command:
    """The limits of a new task (``create``, ``run``): ``none`` sets no limit (the wait for
    reservations: ``TASKGATE_COST_WAIT_S``)."""
    return _limit_options(fn, "Absent or 'none': no limit.")


def update_limit_options(fn: Command) -> Command:
    """The limits ``update`` changes: ``none`` removes one."""
    return _limit_options(fn, "'none' removes this limit.")


def limits_body(**opts: Any) -> dict[str, Any]:
    """Admin API fields from the limit options given (``none`` → ``null``)."""
    names = {"request_limit": "request_limit", "token_limit": "token_limit",
             "max_duration": "max_duration_s", "tool_call_limit": "tool_call_limit",
             "max_stalls": "max_stalls", "cost_limit": "cost_limit_usd",
             "cost_wait": "cost_wait_s"}
    return {api: (None if opts[o] == "none" else opts[o]) for o, api in names.items()
            if opts.get(o) is not None}


_THRESHOLDS_HELP = ("Warning thresholds: percents of each limit, e.g. 50,80,95 (the default); 'none' for no "
                    "warnings.")


def thresholds_body(text: str | None) -> dict[str, Any]:
    """``--thresholds``: "50,80,95" (percents), "none" (no warnings) or "default"."""
    if text is None:
        return {}
    if text.strip().lower() in ("none", "off", ""):
        return {"thresholds": []}
    if text.strip().lower() == "default":
        return {"thresholds": None}
    try:
        return {"thresholds": [float(t) for t in text.split(",")]}
    except ValueError:
        raise click.BadParameter(f"{text!r}: percents separated by commas, e.g. 50,80,95 (or none, default)",
                                 param_hint="--thresholds") from None


def admin_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Adds ``--url`` and ``--json``; turns :class:`AdminError` into a one-line error."""
    @click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
    @click.option("--url", envvar="TASKGATE_URL", default=None,
                  help="Gateway URL (TASKGATE_URL; default the local gateway).")
    @functools.wraps(fn)
    def wrapper(url: str | None, as_json: bool, **kwargs: Any) -> None:
        try:
            fn(connect(url), as_json, **kwargs)
        except AdminError as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


@click.group(cls=FullHelpGroup)
def tasks() -> None:
    """List, create, change, stop, resume and inspect tasks (admin API over HTTP)."""


@tasks.command("list")
@click.option("--status", type=click.Choice(["active", "stopped"]), default=None)
@click.option("--budget", default=None, help="Only the tasks drawing from this budget.")
@click.option("--limit", default=100, show_default=True, help="At most this many tasks.")
@admin_command
def list_(api: AdminClient, as_json: bool, status: str | None, budget: str | None, limit: int) -> None:
    """Tasks with their counters against their limits."""
    rows = api.tasks(status, limit, budget)
    render.print_json(rows) if as_json else render.print_tasks(rows)


@tasks.command()
@click.argument("task_id")
@admin_command
def show(api: AdminClient, as_json: bool, task_id: str) -> None:
    """One task: counters, limits, and why it stopped."""
    task = api.task(task_id)
    render.print_json(task) if as_json else render.show_task(task)


@tasks.command()
@click.option("--id", "task_id", default=None, help="Your id for the task (generated when absent).")
@click.option("--budget", default=None, help="The budget the task draws from.")
@click.option("--thresholds", default=None, help=_THRESHOLDS_HELP)
@limit_options
@admin_command
def create(api: AdminClient, as_json: bool, task_id: str | None, budget: str | None, thresholds: str | None,
           **limits: Any) -> None:
    """Create a task; prints its token (shown only now) and the lines to export."""
    body = {**limits_body(**limits), **thresholds_body(thresholds)}
    if task_id:
        body["id"] = task_id
    if budget:
        body["budget"] = budget
    task = api.create(body)
    if as_json:
        render.print_json(task)
        return
    render.out.print(f"created task [bold]{task['id']}[/bold] (request limit {task['request_limit']})")
    render.out.print(f"token: {task['token']}  (shown only once)\n")
    render.out.print(render.exports(api.url, task["token"]))


@tasks.command()
@click.argument("task_id")
@click.option("--thresholds", default=None, help=_THRESHOLDS_HELP + " 'default' restores 50,80,95.")
@update_limit_options
@admin_command
def update(api: AdminClient, as_json: bool, task_id: str, thresholds: str | None, **limits: Any) -> None:
    """Change limits ('none' removes one) or warning thresholds. Never clears a stop: use resume."""
    body = {**limits_body(**limits), **thresholds_body(thresholds)}
    if not body:
        raise click.UsageError("give at least one limit or --thresholds to change")
    task = api.update(task_id, body)
    render.print_json(task) if as_json else render.show_task(task)


@tasks.command()
@click.argument("task_id")
@click.option("--reason", default="manual", show_default=True, help="Stop reason code.")
@click.option("--message", default=None, help="A note kept with the stop.")
@admin_command
def stop(api: AdminClient, as_json: bool, task_id: str, reason: str, message: str | None) -> None:
    """Stop a task now: its next requests are refused."""
    task = api.stop(task_id, reason, message)
    render.print_json(task) if as_json else render.show_task(task)


@tasks.command()
@click.argument("task_id")
@click.option("--reason", required=True, help="Why the stop is cleared (kept in the history).")
@admin_command
def resume(api: AdminClient, as_json: bool, task_id: str, reason: str) -> None:
    """Clear a task's stop latch (counters are kept)."""
    task = api.resume(task_id, reason)
    render.print_json(task) if as_json else render.show_task(task)


@tasks.command()
@click.option("--older-than-days", type=float, required=True,
              help="Delete tasks stopped or idle for more than this many days (with their history).")
@admin_command
def prune(api: AdminClient, as_json: bool, older_than_days: float) -> None:
    """Delete finished tasks now, as TASKGATE_RETENTION_DAYS does in the background."""
    done = api.request("POST", "/admin/prune", params={"older_than_days": older_than_days})
    render.print_json(done) if as_json else render.out.print(f"deleted {done['deleted']} task(s)")


@tasks.command()
@click.argument("task_id")
@admin_command
def release(api: AdminClient, as_json: bool, task_id: str) -> None:
    """Release the task's stranded dollar holds (past their deadline, or of a gone gateway)."""
    done = api.request("POST", f"/admin/tasks/{task_id}/release-reservations")
    if as_json:
        render.print_json(done)
    else:
        render.out.print(f"released {done['released']} hold(s), ${done['released_usd']}; "
                         f"${done['reserved_usd']} still reserved")


@tasks.command()
@click.argument("task_id")
@admin_command
def events(api: AdminClient, as_json: bool, task_id: str) -> None:
    """The task's history, oldest first."""
    rows = api.events(task_id)
    render.print_json(rows) if as_json else render.out.print(render.events_table(rows))


@tasks.command("tool-calls")
@click.argument("task_id")
@admin_command
def tool_calls(api: AdminClient, as_json: bool, task_id: str) -> None:
    """The loop guard's ledger and its verdict per conversation."""
    ledger = api.tool_calls(task_id)
    if as_json:
        render.print_json(ledger)
        return
    for table in render.tool_calls_tables(ledger):
        render.out.print(table)


@tasks.command()
@click.argument("task_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@admin_command
def delete(api: AdminClient, as_json: bool, task_id: str, yes: bool) -> None:
    """Delete a task with its history; its token stops working."""
    if not yes:
        click.confirm(f"Delete task {task_id} and its history?", abort=True)
    api.delete(task_id)
    render.print_json({"deleted": task_id}) if as_json else render.out.print(f"deleted {task_id}")
