"""``taskgate config check``: validate the providers and models file and show its routing."""

from __future__ import annotations

import os
import sys
import textwrap

import click
from rich.console import Console
from rich.table import Table

from app.cli import startup_report as sr
from app.cli.help import FullHelpGroup
from app.cli.render import out
from app.config import ConfigError, GatewayConfig, gateway_config
from app.config.loader import Problem
from app.config.routing import routing_table
from app.settings import Settings, get_settings

COLUMNS = ("model", "provider", "kind", "base_url", "upstream_model", "price", "max_output_tokens")


def check_config(settings: Settings) -> GatewayConfig:
    """The gateway configuration in force (for ``serve``), or exit 2 with one line: the
    first problem of the file named by ``TASKGATE_CONFIG``, and how to see the others."""
    try:
        return gateway_config(settings, os.environ)
    except ConfigError as exc:
        more = len(exc.problems) - 1
        click.echo(f"taskgate: TASKGATE_CONFIG: {exc.problems[0].line()}"
                   + (f" (and {more} more: taskgate config check {settings.config})" if more else ""), err=True)
        sys.exit(2)


def print_problems(source: str, problems: list[Problem]) -> None:
    """Every problem on stderr: its line, then an example of the shape expected there
    (an example already shown for an earlier problem is referred to, not repeated)."""
    click.echo(f"taskgate: {source}: {len(problems)} problem{'s' if len(problems) != 1 else ''}", err=True)
    shown: set[str] = set()
    for problem in problems:
        click.echo(problem.line(), err=True)
        if problem.example is None:
            continue
        if problem.example in shown:
            click.echo("    expected shape: as in the example above", err=True)
            continue
        shown.add(problem.example)
        click.echo("    expected shape, for example:\n" + textwrap.indent(problem.example, "      "), err=True)


@click.group("config", cls=FullHelpGroup)
def config_group() -> None:
    """The providers and models file (TASKGATE_CONFIG)."""


@config_group.command("check")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
def check(path: str | None) -> None:
    """Validate PATH (default: TASKGATE_CONFIG) and print its routing table. On errors,
    exit 2 after listing every one: file, line, key, what is wrong and an example of the
    expected shape."""
    settings = get_settings()
    if path is not None:
        settings.config = path  # type: ignore[assignment]
    named = "" if path is not None or not settings.config else " (TASKGATE_CONFIG)"
    try:
        config = gateway_config(settings, os.environ)
    except ConfigError as exc:
        print_problems(f"{settings.config}{named}", exc.problems)
        sys.exit(2)
    source = (f"{settings.config}{named}" if settings.config
              else "environment (TASKGATE_UPSTREAM_*, TASKGATE_ANTHROPIC_*)")
    count = len(config.mcp_servers)
    mcp = f", {count} MCP server{'s' if count != 1 else ''}" if count else ""
    out.print(f"{source}: OK, {len(config.providers)} providers, {len(config.models)} models{mcp}")
    if (warning := sr.no_models_warning(config)) is not None:
        out.print(warning.removeprefix("taskgate: "))
    table = Table(*COLUMNS, box=None, header_style="bold")
    for row in routing_table(config):
        table.add_row(*(row[c] for c in COLUMNS))
    wide = Console(highlight=False, width=max(out.width, 160))  # read whole, not truncated
    wide.print(table)
    if config.mcp_servers:
        servers = Table("mcp server", "url", "headers", "timeout_s", "tools", box=None, header_style="bold")
        for server in config.mcp_servers:
            tools = ", ".join(f"{name} ({', '.join(f'{k}={v:g}' for k, v in t.model_dump(exclude_none=True).items())})"
                              for name, t in server.tools.items())
            servers.add_row(f"/mcp/{server.name}", server.url, ", ".join(sorted(server.headers)) or "-",
                            f"{server.timeout_s:g}", tools or "-")
        wide.print(servers)
