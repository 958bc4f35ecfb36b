"""``taskgate config check``: validate the providers and models file and show its routing."""

from __future__ import annotations

import os
import sys

import click
from rich.console import Console
from rich.table import Table

from app.cli.help import FullHelpGroup
from app.cli.render import out
from app.config import ConfigError, GatewayConfig, gateway_config
from app.config.routing import routing_table
from app.settings import Settings, get_settings

COLUMNS = ("model", "provider", "kind", "base_url", "upstream_model", "price", "max_output_tokens")


def check_config(settings: Settings) -> GatewayConfig:
    """The gateway configuration in force, or exit 2 with its one-line error."""
    try:
        return gateway_config(settings, os.environ)
    except ConfigError as exc:
        click.echo(f"taskgate: TASKGATE_CONFIG: {exc}", err=True)
        sys.exit(2)


@click.group("config", cls=FullHelpGroup)
def config_group() -> None:
    """The providers and models file (TASKGATE_CONFIG)."""


@config_group.command("check")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
def check(path: str | None) -> None:
    """Validate PATH (default: TASKGATE_CONFIG) and print its routing table; exit 2 on
    the first error, printed as one line with the file, line and key."""
    settings = get_settings()
    if path is not None:
        settings.config = path  # type: ignore[assignment]
    config = check_config(settings)
    source = settings.config or "environment (TASKGATE_UPSTREAM_*, TASKGATE_ANTHROPIC_*)"
    out.print(f"{source}: OK, {len(config.providers)} providers, {len(config.models)} models")
    table = Table(*COLUMNS, box=None, header_style="bold")
    for row in routing_table(config):
        table.add_row(*(row[c] for c in COLUMNS))
    Console(highlight=False, width=max(out.width, 160)).print(table)  # read whole, not truncated
