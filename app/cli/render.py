"""How the CLI shows tasks, events and the tool-call ledger: ``rich`` tables for
people, JSON for scripts (``--json``)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from app.admission.cost import dollars

out = Console(highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def of(used: Any, limit: Any) -> str:
    return f"{used} / {limit}" if limit is not None else f"{used}"


def tasks_table(tasks: list[dict]) -> Table:
    table = Table("id", "status", "requests", "tokens", "tool calls", "stop reason", box=None,
                  header_style="bold")
    for t in tasks:
        status = "[red]stopped[/red]" if t["status"] == "stopped" else "[green]active[/green]"
        table.add_row(t["id"], status, of(t["admitted_requests"], t["request_limit"]),
                      of(t["total_tokens"], t["token_limit"]), of(t["tool_calls"], t["tool_call_limit"]),
                      t.get("stop_reason") or "")
    return table


def show_task(t: dict) -> None:
    status = "[red]stopped[/red]" if t["status"] == "stopped" else "[green]active[/green]"
    out.print(f"[bold]{t['id']}[/bold]  {status}")
    table = Table(box=None, show_header=False)
    table.add_row("requests", of(t["admitted_requests"], t["request_limit"]))
    table.add_row("tokens", of(t["total_tokens"], t["token_limit"])
                  + f"  (input {t['input_tokens']}, output {t['output_tokens']})")
    table.add_row("tool calls", of(t["tool_calls"], t["tool_call_limit"]))
    table.add_row("max duration", f"{t['max_duration_s']} s" if t.get("max_duration_s") else "none")
    table.add_row("stalls", of(t["stalls"], t.get("max_stalls")))
    if t.get("cost_limit_usd") is not None or t.get("cost_usd"):
        limit = t.get("cost_limit_usd")
        table.add_row("cost", f"{dollars(t.get('cost_usd'))}" + (f" of {dollars(limit)}" if limit is not None else "")
                      + f" spent, {dollars(t.get('reserved_usd'))} reserved")
    if t.get("allowed_models") is not None:
        table.add_row("allowed models", ", ".join(t["allowed_models"]) or "none")
    table.add_row("first request", str(t.get("first_admitted_at") or "-"))
    if t["status"] == "stopped":
        table.add_row("stop reason", str(t.get("stop_reason")))
        table.add_row("stopped at", str(t.get("stopped_at")))
    out.print(table)
    if t.get("stop_message"):
        out.print(f"\n{t['stop_message']}")


def events_table(events: list[dict]) -> Table:
    table = Table("#", "time", "kind", "reason", "what happened", box=None, header_style="bold")
    for e in events:
        table.add_row(str(e["id"]), str(e["created_at"])[:19].replace("T", " "), e["kind"],
                      e.get("reason") or "", e.get("message") or json.dumps(e.get("detail") or {}))
    return table


def tool_calls_tables(ledger: dict) -> tuple[Table, Table]:
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
    return (f"# OpenAI-style agents (openai SDK, Codex CLI, opencode, ...)\n"
            f"export OPENAI_BASE_URL={base}/v1 OPENAI_API_KEY={token}\n"
            f"# Anthropic-style agents (anthropic SDK, Claude Code)\n"
            f"export ANTHROPIC_BASE_URL={base} ANTHROPIC_API_KEY={token}")
