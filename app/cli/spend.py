"""``taskgate spend``: the fleet's spend over the admin API (``GET /admin/spend``).

Dollars, input and output tokens and requests per budget, task, run, model and UTC day
(``--group-by``), over ``--from`` .. ``--to`` (UTC days, both included; default the 30
days up to today). A table for people, ``--csv`` or ``--jsonl`` for finance and scripts,
``--json`` for the API's pages; every page is fetched (the API's ``next`` link), each
printed as it arrives. A budget's row includes the budgets nested in it, as its totals do.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
from rich.table import Table

from app.admission.cost import dollars
from app.cli import render
from app.cli.client import AdminClient, AdminError, JsonObject
from app.cli.tasks import admin_command

METRICS = ("requests", "input_tokens", "output_tokens", "total_tokens", "cost_usd")
PAGE_ROWS = 5000


def pages(api: AdminClient, params: dict[str, Any]) -> Iterator[JsonObject]:
    """Every page of ``GET /admin/spend`` with ``params``, following ``next``."""
    page = api.json_object("GET", "/admin/spend", params={**params, "format": "json", "limit": PAGE_ROWS})
    while True:
        yield page
        following = page.get("next")
        if not following:
            return
        if not isinstance(following, str) or not following.startswith("/admin/spend?"):
            raise AdminError(f"GET /admin/spend: unexpected next link {str(following)[:80]!r}")
        page = api.json_object("GET", following)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "(none)" if key in ("budget", "run") else "(unknown)" if key == "model" else ""
    return dollars(value) if key == "cost_usd" else str(value)


def table(keys: list[str], rows: list[JsonObject], total: JsonObject | None) -> Table:
    """Rows as a table (the keys, then requests, tokens in and out, dollars), with the
    fleet's total last when there is one."""
    out = Table(*keys, "requests", "input tokens", "output tokens", "dollars", box=None, header_style="bold")
    for r in rows:
        out.add_row(*(_cell(k, r.get(k)) for k in keys), *(_cell(m, r[m]) for m in
                                                            ("requests", "input_tokens", "output_tokens", "cost_usd")))
    if total is not None and keys:
        out.add_row(*(["[bold]total[/bold]"] + [""] * (len(keys) - 1)),
                    *(_cell(m, total[m]) for m in ("requests", "input_tokens", "output_tokens", "cost_usd")))
    return out


@click.command()
@click.option("--group-by", default="budget", show_default=True,
              help="Keys, separated by commas: budget, task, run, model, day ('' for one total row).")
@click.option("--from", "from_", default=None, help="First UTC day (YYYY-MM-DD); default 29 days before --to.")
@click.option("--to", default=None, help="Last UTC day, included (YYYY-MM-DD); default today.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV (one header line), for spreadsheets.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON object a line.")
@admin_command
def spend(api: AdminClient, as_json: bool, group_by: str, from_: str | None, to: str | None, as_csv: bool,
          as_jsonl: bool) -> None:
    """Spend per budget, task, run, model or day: dollars, tokens, requests (UTC days)."""
    params = {k: v for k, v in (("group_by", group_by), ("from", from_), ("to", to)) if v is not None}
    writer: Any = None
    rows: list[JsonObject] = []
    total: JsonObject | None = None
    keys: list[str] = []
    for page in pages(api, params):
        keys, total = page["group_by"], page["total"]
        if as_json:
            render.print_json(page)
        elif as_jsonl:
            for r in page["data"]:
                print(json.dumps(r))
        elif as_csv:
            if writer is None:
                writer = csv.DictWriter(sys.stdout, fieldnames=[*keys, *METRICS], lineterminator="\n")
                writer.writeheader()
            writer.writerows(page["data"])
        else:
            rows += page["data"]
    if not (as_json or as_jsonl or as_csv):
        render.print_wide(table(keys, rows, total))
        render.out.print(f"UTC days {page['from']} to {page['to']}; a budget's row includes its nested budgets.")
