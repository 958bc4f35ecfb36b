"""The ``taskgate`` command.

- ``taskgate serve``: run the gateway (embedded PostgreSQL unless
  ``TASKGATE_DATABASE_URL`` is set).
- ``taskgate migrate``: apply the database migrations.
- ``taskgate upstream``: run the scripted mock provider (tests, demos, benchmarks).
- ``taskgate demo``: watch the loop guard stop a looping agent, in one command.
- ``taskgate tasks list|show|create|update|stop|resume|events|tool-calls|delete``:
  the admin API over HTTP (:mod:`app.cli.tasks`).
- ``taskgate budgets list|show|create|update|delete|keys|key-create|key-revoke``: fleet
  budgets (:mod:`app.cli.budgets`).
- ``taskgate spend``: dollars, tokens and requests per budget, task, run, model and day,
  as a table, CSV or JSON lines (:mod:`app.cli.spend`).
- ``taskgate run [limits] -- <agent command ...>``: run an agent under a new task
  (:mod:`app.cli.run`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
from typing import TYPE_CHECKING

import click

from app import startup
from app.cli.config import check_config, config_group
from app.cli.help import FullHelpGroup

if TYPE_CHECKING:
    from app.config import GatewayConfig


@click.group(cls=FullHelpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="taskgate", prog_name="taskgate", message="%(prog)s %(version)s")
def main() -> None:
    """taskgate: an OpenAI- and Anthropic-compatible gateway that stops runaway agents.

    Docs: taskgate docs lists the pages, shipped with taskgate (taskgate docs cli: these
    commands)."""


@main.command(short_help="Run the gateway.")
@click.option("--host", default=None, help="Listen address (TASKGATE_HOST, default 127.0.0.1).")
@click.option("--port", default=None, type=click.IntRange(1, 65535),
              help="Listen port (TASKGATE_PORT, default 8080).")
@click.option("--workers", default=1, show_default=True, help="Gateway processes sharing the database.")
@click.option("--log-level", default="info", show_default=True)
def serve(host: str | None, port: int | None, workers: int, log_level: str) -> None:
    """Run the gateway. Configuration problems (a bad setting, an unreachable database,
    a port in use) exit 2 with one line naming the setting."""
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # prometheus-client's multiprocess mode: must be set before it is first imported
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="taskgate-metrics-")
        atexit.register(shutil.rmtree, os.environ["PROMETHEUS_MULTIPROC_DIR"], True)
    from app.console import admin_token
    from app.main import embedded_pgdata, resolve_database
    from app.server import uvicorn_options

    with startup.exit_on_error():
        settings = startup.load_settings()
    for line in _unknown_variable_warnings():  # first: a misspelled setting explains what follows
        click.echo(line, err=True)
    config = check_config(settings)
    report = _startup_report(settings, config)
    host = host or settings.host
    port = port or settings.port
    with startup.exit_on_error():
        sock = startup.bind(host, port)  # before anything starts, and before "listening on"
        # Resolve the database once here so every worker shares it (and the embedded
        # server is owned by this parent process).
        database_url = startup.prepare_database(settings, resolve_database)
    if (where := admin_token.ensure(settings)) is not None:
        click.echo(where, err=True)
    if settings.database_url is None:  # embedded: every worker supervises it
        settings.embedded_pgdata = embedded_pgdata(settings)
        os.environ["TASKGATE_EMBEDDED_PGDATA"] = str(settings.embedded_pgdata)
    os.environ["TASKGATE_ADMIN_TOKEN"] = settings.admin_token or ""
    os.environ["TASKGATE_DATABASE_URL"] = database_url
    os.environ["TASKGATE_MIGRATE_ON_START"] = "false"
    settings.database_url, settings.migrate_on_start = database_url, False
    # uvicorn re-raises SIGTERM after its graceful shutdown; turn it into a normal exit
    # so atexit handlers run (they stop the embedded PostgreSQL this process owns).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    click.echo(f"taskgate: listening on http://{host}:{port} (OpenAI base URL http://{host}:{port}/v1)",
               err=True)
    for line in report:
        click.echo(line, err=True)
    if (warning := startup.open_metrics_warning(host, settings.metrics_token)) is not None:
        click.echo(warning, err=True)
    startup.serve(sock, host=host, port=port, workers=workers, log_level=log_level,
                  options=uvicorn_options(settings))


def _unknown_variable_warnings() -> list[str]:
    """One warning per ``TASKGATE_*`` name (environment or ``.env``) that is no setting,
    with the closest known name (:mod:`app.cli.startup_report`)."""
    from pathlib import Path

    from app.cli import startup_report as sr
    from app.settings import Settings

    env_file = Path(".env") if Path(".env").is_file() else None
    names = [*os.environ, *(sr.env_file_names(env_file) if env_file else [])]
    return sr.warning_lines(sr.unknown_variables(names, sr.known_variables(Settings.model_fields)))


def _startup_report(settings: object, config: GatewayConfig) -> list[str]:
    """Where requests go (providers, MCP servers, a file without models) and where the
    configuration came from (:mod:`app.cli.startup_report`)."""
    from pathlib import Path

    from app.cli import startup_report as sr
    from app.settings import Settings

    known = sr.known_variables(Settings.model_fields)
    env_file = Path(".env") if Path(".env").is_file() else None
    lines = [sr.providers_line(config), sr.mcp_line(config), sr.no_models_warning(config),
             sr.sources_line(os.environ, known, env_file.resolve() if env_file else None,
                             getattr(settings, "config", None))]
    return [line for line in lines if line is not None]


@main.command(short_help="Apply database migrations.")
def migrate() -> None:
    """Apply database migrations (to TASKGATE_DATABASE_URL, or the embedded database)."""
    from app.main import resolve_database

    with startup.exit_on_error():
        settings = startup.load_settings()
        settings.migrate_on_start = True
        url = startup.prepare_database(settings, resolve_database, serving=False)
    click.echo(f"taskgate: database migrated ({url.split('@')[-1]})")


@main.command(short_help="Watch the loop guard stop a looping agent.")
@click.option("--max-turns", default=20, show_default=True, help="Give up after this many agent turns.")
@click.option("--verbose", "-v", is_flag=True,
              help="Also print the gateway's log lines and the stop's detail (hashes, thresholds).")
@click.option("--mcp", is_flag=True, help="An agent looping on an MCP tool through /mcp instead.")
def demo(max_turns: int, verbose: bool, mcp: bool) -> None:
    """Watch the loop guard stop a looping agent (gateway + scripted upstream + agent);
    with --mcp, an agent calling the same MCP tool through the gateway over and over."""
    if mcp:
        from app.demo_mcp import run_mcp_demo

        task = run_mcp_demo(max_calls=max_turns, verbose=verbose)
    else:
        from app.demo import run_demo

        task = run_demo(max_turns=max_turns, verbose=verbose)
    if task["status"] != "stopped":
        raise SystemExit(1)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
              add_help_option=False, short_help="Run the scripted mock provider (for trying agents offline).")
@click.pass_context
def upstream(ctx: click.Context) -> None:
    """Run the scripted mock provider; taskgate upstream --help lists its options."""
    from app.testing import upstream as mock

    mock.main(list(ctx.args), prog="taskgate upstream")


def _add_console_commands() -> None:
    from app.cli.budgets import budgets
    from app.cli.docs import docs
    from app.cli.run import run
    from app.cli.spend import spend
    from app.cli.tasks import tasks

    main.add_command(tasks)
    main.add_command(budgets)
    main.add_command(spend)
    main.add_command(run)
    main.add_command(docs)


_add_console_commands()


main.add_command(config_group)
