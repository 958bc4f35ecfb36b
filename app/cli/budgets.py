"""``taskgate budgets ...``: fleet budgets and their keys over the admin API.

``list``, ``show``, ``create``, ``update``, ``delete``, ``keys`` (list), ``key-create``,
``key-revoke``, ``pause`` and ``resume`` (the kill switch), ``events`` (its history);
``create`` and ``update`` also set rates and per-model limits. Tables by default,
``--json`` for scripts; ``--url`` and the admin token as for ``taskgate tasks``
(:mod:`app.cli.tasks`).
"""

from __future__ import annotations

import getpass
import sys
from typing import Any

import click
from rich.table import Column, Table

from app.admission.cost import dollars
from app.cli import render
from app.cli.client import AdminClient, JsonObject
from app.cli.tasks import Command, OptionalNumber, admin_command, limit_options, limits_body, thresholds_body


def _limit_options(fn: Command) -> Command:
    for name, kind, help_ in reversed((
        ("--request-limit", int, "Admitted requests per window."),
        ("--token-limit", int, "Input + output tokens per window."),
        ("--cost-limit", float, "Dollar ceiling per window (US dollars)."),
    )):
        fn = click.option(name, type=OptionalNumber(kind), default=None, help=help_ + " 'none' removes it.")(fn)
    return fn


def _rate_options(fn: Command) -> Command:
    fn = click.option("--model-limit", "model_limit", multiple=True, metavar="GLOB:cost=USD:tokens=N",
                      help="A limit per window for the models matching GLOB, e.g. 'gpt-4*:cost=50' (repeat for "
                      "more; replaces the list); 'none' removes them.")(fn)
    for name, help_ in reversed((("--requests-per-minute", "Requests admitted per minute (429 over it)."),
                                 ("--tokens-per-minute", "Tokens reported per minute (429 once reached)."))):
        fn = click.option(name, type=OptionalNumber(int), default=None, help=help_ + " 'none' removes it.")(fn)
    return fn


def _model_limit(text: str) -> dict[str, Any]:
    """One ``--model-limit``: ``GLOB:cost=USD:tokens=N`` (either or both limits)."""
    parts = text.split(":")
    entry: dict[str, Any] = {}
    while len(parts) > 1 and parts[-1].split("=", 1)[0] in ("cost", "tokens") and "=" in parts[-1]:
        name, value = parts.pop().split("=", 1)
        try:
            entry["cost_limit_usd" if name == "cost" else "token_limit"] = float(value) if name == "cost" \
                else int(value)
        except ValueError:
            raise click.BadParameter(f"{text!r}: {name}= takes a number", param_hint="--model-limit") from None
    return {"model": ":".join(parts), **entry}


def _rates(requests_per_minute: Any, tokens_per_minute: Any, model_limit: tuple[str, ...]) -> dict[str, Any]:
    body = {k: (None if v == "none" else v) for k, v in (("requests_per_minute", requests_per_minute),
                                                         ("tokens_per_minute", tokens_per_minute)) if v is not None}
    if model_limit:
        body["model_limits"] = [] if model_limit == ("none",) else [_model_limit(t) for t in model_limit]
    return body


_THRESHOLDS_HELP = "Warning thresholds: percents of each limit, e.g. 50,80,95 (the default); 'none' for no warnings."


def _limits(request_limit: Any, token_limit: Any, cost_limit: Any) -> dict[str, Any]:
    given = {"request_limit": request_limit, "token_limit": token_limit, "cost_limit_usd": cost_limit}
    return {k: (None if v == "none" else v) for k, v in given.items() if v is not None}


def _of(used: Any, limit: Any) -> str:
    return f"{used} / {limit}" if limit is not None else str(used)


def _cost(spend: JsonObject, limit: Any) -> str:
    text = dollars(spend["cost_usd"]) + (f" / {dollars(limit)}" if limit is not None else "")
    return text + (f" (+{dollars(spend['reserved_usd'])} reserved)" if spend["reserved_usd"] else "")


def budgets_table(budgets: list[JsonObject]) -> Table:
    table = Table(Column("id", no_wrap=True), "parent", "window", "requests", "tokens", "dollars", "resets at",
                  box=None, header_style="bold")
    for b in budgets:
        cur = b["current"]
        table.add_row(b["id"] + (" (paused)" if b.get("paused_at") else ""), b.get("parent") or "",
                      b.get("window") or "lifetime",
                      _of(cur["admitted_requests"], b["request_limit"]), _of(cur["total_tokens"], b["token_limit"]),
                      _cost(cur, b["cost_limit_usd"]), render.when(cur.get("resets_at")) or "-")
    return table


def show_budget(b: JsonObject) -> None:
    render.out.print(f"[bold]{b['id']}[/bold]  {b.get('window') or 'lifetime'} window ({b['timezone']})"
                     + (f", in {b['parent']}" if b.get("parent") else ""))
    table = Table(box=None, show_header=False)
    cur = b["current"]
    table.add_row("requests", _of(cur["admitted_requests"], b["request_limit"]))
    table.add_row("tokens", _of(cur["total_tokens"], b["token_limit"]))
    table.add_row("dollars", _cost(cur, b["cost_limit_usd"]))
    table.add_row("window", f"{cur['window_start']} to {cur.get('window_end') or 'never'}")
    table.add_row("tasks", str(b.get("tasks", 0)))
    crossed = ", ".join(f"{w['threshold']:g} % of {w['limit']}" for w in cur.get("warnings") or [])
    table.add_row("warnings", (", ".join(f"{t:g} %" for t in b.get("thresholds") or []) or "none")
                  + (f"; crossed this window: {crossed}" if crossed else ""))
    rates = [f"{b[k]} {unit}/min" for k, unit in (("requests_per_minute", "requests"), ("tokens_per_minute", "tokens"))
             if b.get(k) is not None]
    if rates:
        minute = b.get("minute") or {}
        table.add_row("rates", ", ".join(rates) + f" (this minute: {minute.get('requests', 0)} requests, "
                      f"{minute.get('tokens', 0)} tokens)")
    spent = {m["model"]: m for m in cur.get("models") or []}
    for e in b.get("model_limits") or []:
        m = spent.get(e["model"], {"total_tokens": 0, "cost_usd": 0})
        limits = [_of(m["total_tokens"], e["token_limit"]) + " tokens" if e.get("token_limit") is not None else "",
                  _cost(m | {"reserved_usd": 0}, e["cost_limit_usd"]) if e.get("cost_limit_usd") is not None else ""]
        table.add_row(f"model {e['model']}", ", ".join(x for x in limits if x))
    if b.get("paused_at"):
        table.add_row("[bold red]paused[/bold red]", f"since {render.when(b['paused_at'])} by {b.get('paused_by')}: "
                      f"{b.get('paused_reason')} (every task under it is refused)")
    if b.get("children"):
        table.add_row("nested", ", ".join(b["children"]))
    render.out.print(table)
    if b.get("windows"):
        past = Table("window start", "requests", "tokens", "dollars", box=None, header_style="bold",
                     title="past windows")
        for w in b["windows"]:
            past.add_row(render.when(w["window_start"]), str(w["admitted_requests"]),
                         str(w["total_tokens"]), dollars(w["cost_usd"]))
        render.out.print(past)


@click.group()
def budgets() -> None:
    """Fleet budgets: ceilings over many tasks, per window (admin API over HTTP)."""


@budgets.command("list")
@click.option("--parent", default=None, help="Only the budgets nested in this one.")
@admin_command
def list_(api: AdminClient, as_json: bool, parent: str | None) -> None:
    """Budgets with their spend in the current window."""
    rows = api.request("GET", "/admin/budgets", params={"parent": parent} if parent else {})["data"]
    render.print_json(rows) if as_json else render.print_wide(budgets_table(rows))


@budgets.command()
@click.argument("budget_id")
@admin_command
def show(api: AdminClient, as_json: bool, budget_id: str) -> None:
    """One budget: spend in this window and the windows before."""
    b = api.request("GET", f"/admin/budgets/{budget_id}")
    render.print_json(b) if as_json else show_budget(b)


@budgets.command()
@click.option("--id", "budget_id", default=None, help="Your id for the budget (generated when absent).")
@click.option("--parent", default=None, help="The budget this one nests in.")
@click.option("--window", type=click.Choice(["day", "week", "month"]), default=None,
              help="Calendar window of the limits (default: lifetime).")
@click.option("--timezone", default="UTC", show_default=True, help="IANA timezone of the window.")
@click.option("--thresholds", default=None, help=_THRESHOLDS_HELP)
@_limit_options
@_rate_options
@admin_command
def create(api: AdminClient, as_json: bool, budget_id: str | None, parent: str | None, window: str | None,
           timezone: str, thresholds: str | None, request_limit: Any, token_limit: Any, cost_limit: Any,
           **rates: Any) -> None:
    """Create a budget."""
    body: dict[str, Any] = {"window": window, "timezone": timezone, **_limits(request_limit, token_limit, cost_limit),
                            **thresholds_body(thresholds), **_rates(**rates)}
    if budget_id:
        body["id"] = budget_id
    if parent:
        body["parent"] = parent
    b = api.request("POST", "/admin/budgets", json=body)
    render.print_json(b) if as_json else show_budget(b)


@budgets.command()
@click.argument("budget_id")
@click.option("--thresholds", default=None, help=_THRESHOLDS_HELP + " 'default' restores 50,80,95.")
@_limit_options
@_rate_options
@admin_command
def update(api: AdminClient, as_json: bool, budget_id: str, thresholds: str | None, request_limit: Any,
           token_limit: Any, cost_limit: Any, **rates: Any) -> None:
    """Change a budget's limits, rates or model limits ('none' removes one) or its warning thresholds."""
    body = {**_limits(request_limit, token_limit, cost_limit), **thresholds_body(thresholds), **_rates(**rates)}
    if not body:
        raise click.UsageError("give at least one limit or --thresholds to change")
    b = api.request("PATCH", f"/admin/budgets/{budget_id}", json=body)
    render.print_json(b) if as_json else show_budget(b)


@budgets.command()
@click.argument("budget_id")
@admin_command
def delete(api: AdminClient, as_json: bool, budget_id: str) -> None:
    """Delete a budget that no task draws from and no budget nests in."""
    api.request("DELETE", f"/admin/budgets/{budget_id}")
    render.print_json({"deleted": budget_id}) if as_json else render.out.print(f"deleted {budget_id}")


@budgets.command()
@click.argument("budget_id")
@admin_command
def keys(api: AdminClient, as_json: bool, budget_id: str) -> None:
    """The budget's keys (never their secrets)."""
    rows = api.request("GET", f"/admin/budgets/{budget_id}/keys")["data"]
    if as_json:
        render.print_json(rows)
        return
    table = Table("id", "created", "revoked", "template", box=None, header_style="bold")
    for k in rows:
        table.add_row(k["id"], render.when(k["created_at"]),
                      render.when(k.get("revoked_at")),
                      ", ".join(f"{name}={value}" for name, value in k["template"].items()))
    render.print_wide(table)


@budgets.command("key-create")
@click.argument("budget_id")
@limit_options
@admin_command
def key_create(api: AdminClient, as_json: bool, budget_id: str, **limits: Any) -> None:
    """A budget key: each agent run using it gets its own task with these limits."""
    key = api.request("POST", f"/admin/budgets/{budget_id}/keys", json={"template": limits_body(**limits)})
    if as_json:
        render.print_json(key)
        return
    render.out.print(f"created key [bold]{key['id']}[/bold] for budget {budget_id}")
    render.out.print(f"key: {key['key']}  (shown only once)\n")
    render.out.print(render.exports(api.url, key["key"]))


@budgets.command("key-revoke")
@click.argument("budget_id")
@click.argument("key_id")
@admin_command
def key_revoke(api: AdminClient, as_json: bool, budget_id: str, key_id: str) -> None:
    """Revoke a key: its next request is refused (the tasks of its runs stay)."""
    api.request("DELETE", f"/admin/budgets/{budget_id}/keys/{key_id}")
    render.print_json({"revoked": key_id}) if as_json else render.out.print(f"revoked {key_id}")


@budgets.command()
@click.argument("budget_id")
@click.option("--reason", required=True, help="Why (every refused request quotes it).")
@click.option("--by", default=lambda: getpass.getuser(), show_default="your user name", help="Who pauses it.")
@click.option("--yes", is_flag=True, help="Do not ask for a confirmation (asked only on a terminal).")
@admin_command
def pause(api: AdminClient, as_json: bool, budget_id: str, reason: str, by: str, yes: bool) -> None:
    """The kill switch: refuse every task under a budget (and its nested budgets) and cut
    their open requests in every gateway, until 'resume'. Tasks keep their own state."""
    if not yes and sys.stdin.isatty():
        b = api.request("GET", f"/admin/budgets/{budget_id}")
        nested = f" and the tasks of {len(b['children'])} nested budget(s)" if b.get("children") else ""
        click.confirm(f"Pause budget {budget_id}? Its {b.get('tasks', 0)} task(s){nested} are refused and their "
                      "open requests cut now", abort=True)
    b = api.request("POST", f"/admin/budgets/{budget_id}/pause", json={"reason": reason, "by": by})
    render.print_json(b) if as_json else show_budget(b)


@budgets.command()
@click.argument("budget_id")
@click.option("--reason", required=True, help="Why the pause is lifted (kept in the budget's history).")
@click.option("--by", default=lambda: getpass.getuser(), show_default="your user name", help="Who resumes it.")
@admin_command
def resume(api: AdminClient, as_json: bool, budget_id: str, reason: str, by: str) -> None:
    """Lift a budget's pause: its tasks are admitted again at their next request."""
    b = api.request("POST", f"/admin/budgets/{budget_id}/resume", json={"reason": reason, "by": by})
    render.print_json(b) if as_json else show_budget(b)


@budgets.command()
@click.argument("budget_id")
@admin_command
def events(api: AdminClient, as_json: bool, budget_id: str) -> None:
    """A budget's history: paused, resumed (who, why, when)."""
    rows = api.request("GET", f"/admin/budgets/{budget_id}/events")["data"]
    if as_json:
        render.print_json(rows)
        return
    table = Table("#", "when", "kind", "reason", "detail", box=None, header_style="bold")
    for n, e in enumerate(rows, start=1):
        table.add_row(str(n), render.when(e["created_at"]), e["kind"], e.get("reason") or "",
                      ", ".join(f"{k}={v}" for k, v in e["detail"].items()))
    render.print_wide(table)
