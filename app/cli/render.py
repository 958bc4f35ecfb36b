"""How the CLI shows tasks, events and the tool-call ledger: ``rich`` tables for
people, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from app.admission.cost import dollars
from app.cli.client import JsonObject

out = Console(highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def when(at: Any) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` (``""`` for none)."""
    return str(at or "")[:19].replace("T", " ")


def of(used: Any, limit: Any) -> str:
    return f"{used} / {limit}" if limit is not None else f"{used}"


def tokens_text(t: JsonObject) -> str:
    """A task's tokens: ``unknown`` when upstream reported none for some answers (with
    ``TASKGATE_STREAM_USAGE=false``, a streamed chat completion that did not ask)."""
    total, unknown = t["total_tokens"], t.get("unmetered_responses") or 0
    if not unknown:
        return str(total)
    return "unknown" if total == 0 else f"{total} + unknown"


def cost_text(t: JsonObject) -> str:
    """``$0.78 of $5.00 spent, $1.20 reserved`` (``-`` for a task without dollars)."""
    limit = t.get("cost_limit_usd")
    if limit is None and not t.get("cost_usd") and not t.get("reserved_usd"):
        return "-"
    return (dollars(t.get("cost_usd")) + (f" of {dollars(limit)}" if limit is not None else "")
            + f" spent, {dollars(t.get('reserved_usd'))} reserved")


def cost_cell(t: JsonObject) -> str:
    """The tasks list's dollars: ``$0.78/$5.00 +$1.20`` (spent / ceiling + reserved)."""
    if cost_text(t) == "-":
        return "-"
    limit = t.get("cost_limit_usd")
    return (dollars(t.get("cost_usd")) + (f"/{dollars(limit)}" if limit is not None else "")
            + f" +{dollars(t.get('reserved_usd'))}")


#: Least width of a list when the output is not a terminal (scripts, grep).
PIPED_WIDTH = 160


def print_wide(table: Table) -> None:
    """A list (tasks, budgets) at the terminal's width, else as wide as its widest row
    (at least :data:`PIPED_WIDTH`): one line a row for scripts and grep, not cells wrapped
    at 80 columns, however long its ids (a budget key's run task id has up to 126)."""
    if out.is_terminal:
        out.print(table)
        return
    width = max(PIPED_WIDTH, Console(width=10_000).measure(table).maximum)  # measures are capped at the width
    Console(highlight=False, soft_wrap=True, width=width).print(table)


def print_tasks(tasks: list[JsonObject]) -> None:
    """The tasks list (:func:`print_wide`)."""
    print_wide(tasks_table(tasks))


def tasks_table(tasks: list[JsonObject]) -> Table:
    table = Table(Column("id", no_wrap=True), "status", "requests", "refused", "tokens", "tool calls",
                  "dollars (spent/ceiling +reserved)", "stop reason", box=None, header_style="bold")
    for t in tasks:
        status = "[red]stopped[/red]" if t["status"] == "stopped" else "[green]active[/green]"
        table.add_row(t["id"], status, of(t["admitted_requests"], t["request_limit"]),
                      str(t.get("refused_requests") or 0), of(tokens_text(t), t["token_limit"]),
                      of(t["tool_calls"], t["tool_call_limit"]), cost_cell(t), t.get("stop_reason") or "")
    return table


def show_task(t: JsonObject) -> None:
    status = "[red]stopped[/red]" if t["status"] == "stopped" else "[green]active[/green]"
    out.print(f"[bold]{t['id']}[/bold]  {status}")
    table = Table(box=None, show_header=False)
    table.add_row("requests", of(t["admitted_requests"], t["request_limit"]))
    table.add_row("refused", f"{t.get('refused_requests') or 0} (requests refused while stopped)")
    unknown = t.get("unmetered_responses") or 0
    table.add_row("tokens", of(tokens_text(t), t["token_limit"])
                  + f"  (input {t['input_tokens']}, output {t['output_tokens']}"
                  + (f"; {unknown} answers without usage)" if unknown else ")"))
    table.add_row("tool calls", of(t["tool_calls"], t["tool_call_limit"]))
    table.add_row("max duration", f"{t['max_duration_s']} s" if t.get("max_duration_s") else "none")
    table.add_row("stalls", of(t["stalls"], t.get("max_stalls")))
    if t.get("strikes"):
        table.add_row("strikes", f"{t['strikes']} (answers cut or withheld by the loop guard; a second in one "
                                 "conversation stops the task)")
    if cost_text(t) != "-":
        table.add_row("cost", cost_text(t))
    if t.get("cost_wait_s") is not None:
        table.add_row("cost wait", f"{t['cost_wait_s']:g} s")
    if t.get("allowed_models") is not None:
        table.add_row("allowed models", ", ".join(t["allowed_models"]) or "none")
    if "thresholds" in t:
        crossed = ", ".join(f"{w['threshold']:g} % of {w['limit']}" for w in t.get("warnings") or [])
        table.add_row("warnings", (", ".join(f"{x:g} %" for x in t["thresholds"]) or "none")
                      + (f" (crossed: {crossed})" if crossed else ""))
    table.add_row("first request", str(t.get("first_admitted_at") or "-"))
    if t["status"] == "stopped":
        table.add_row("stop reason", str(t.get("stop_reason")))
        table.add_row("stopped at", str(t.get("stopped_at")))
    out.print(table)
    if t.get("stop_message"):
        out.print(f"\n{t['stop_message']}")


def events_table(events: list[JsonObject]) -> Table:
    """The task's history numbered 1, 2, … as the dashboard numbers it (``--json`` keeps
    each event's id)."""
    table = Table("#", "time", "kind", "reason", "what happened", box=None, header_style="bold")
    for n, e in enumerate(events, 1):
        table.add_row(str(n), when(e["created_at"]), e["kind"],
                      e.get("reason") or "", e.get("message") or json.dumps(e.get("detail") or {}))
    return table


def tool_calls_tables(ledger: JsonObject) -> tuple[Table, Table]:
    conv = Table("conversation", "tool calls", "verdict", "reason", "count", box=None,
                 header_style="bold", title="conversations")
    for c in ledger["conversations"]:
        conv.add_row(c["conversation_key"][:16], str(c["tool_calls"]), c["verdict"], c.get("reason") or "",
                     str(c["count"]))
    calls = Table("seq", "conversation", "tool", "arguments", "result", "error", box=None,
                  header_style="bold", title="tool calls")
    for r in ledger["data"]:
        calls.add_row(str(r["seq"]), r["conversation_key"][:16], r["tool_name"], r["arguments_hash"][:12],
                      (r.get("result_hash") or "pending")[:12],
                      "" if r.get("is_error") is None else ("yes" if r["is_error"] else "no"))
    return conv, calls


def exports(url: str, token: str) -> str:
    """The lines to paste into an agent's shell."""
    base = url.rstrip("/")
    return (f"# OpenAI-style agents (openai SDK, Qwen Code, ...; Codex CLI, opencode: taskgate docs agents)\n"
            f"export OPENAI_BASE_URL={base}/v1 OPENAI_API_KEY={token}\n"
            f"# Anthropic-style agents (anthropic SDK, Claude Code)\n"
            f"export ANTHROPIC_BASE_URL={base} ANTHROPIC_API_KEY={token}")
