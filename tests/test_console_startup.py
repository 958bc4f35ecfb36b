"""What ``taskgate serve`` says when it starts, and the CLI's help pages: a misspelled
``TASKGATE_*`` is warned about with the closest known name, the start-up lines say where
requests go and where the configuration came from (never a key), ``--help`` lists every
command whole and without reStructuredText markup, ``--version``, ``taskgate upstream
--help`` names itself."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from app.cli import main
from app.cli import startup_report as sr
from app.config import GatewayConfig
from app.settings import Settings
from tests.support import PROVIDER_KEY, GatewayProcess

KNOWN = sr.known_variables(Settings.model_fields)


def test_unknown_variables_get_the_closest_known_name() -> None:
    env = ["TASKGATE_UPSTREAM_BASEURL", "TASKGATE_PORT", "PATH", "taskgate_stream_idle_timout_s",
           "TASKGATE_URL", "TASKGATE_WHATEVER"]
    assert sr.unknown_variables(env, KNOWN) == [
        ("TASKGATE_UPSTREAM_BASEURL", "TASKGATE_UPSTREAM_BASE_URL"),
        ("TASKGATE_WHATEVER", None),
        ("taskgate_stream_idle_timout_s", "TASKGATE_STREAM_IDLE_TIMEOUT_S"),
    ]
    lines = sr.warning_lines(sr.unknown_variables(env, KNOWN))
    assert lines[0] == ("taskgate: warning: TASKGATE_UPSTREAM_BASEURL is not a setting and is ignored "
                        "(did you mean TASKGATE_UPSTREAM_BASE_URL?)")


def test_serve_warns_and_names_providers_and_sources(database_url, upstream) -> None:
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_UPSTREAM_BASEURL="http://typo") as gw:
        out = gw.output()
    assert ("taskgate: warning: TASKGATE_UPSTREAM_BASEURL is not a setting and is ignored "
            "(did you mean TASKGATE_UPSTREAM_BASE_URL?)") in out
    assert f"taskgate: providers: openai (openai) → {upstream.base_url}/v1, key set; " \
           f"anthropic (anthropic) → {upstream.base_url}, key set" in out
    sources = next(line for line in out.splitlines() if line.startswith("taskgate: configuration from"))
    assert "TASKGATE_UPSTREAM_BASE_URL" in sources and "TASKGATE_UPSTREAM_BASEURL" not in sources
    assert "TASKGATE_CONFIG unset" in sources
    assert PROVIDER_KEY not in out


def test_start_up_names_mcp_servers_and_warns_of_a_file_without_models() -> None:
    # found trying a real MCP client: docs/mcp.md's file had no models, every model call was
    # 404 and neither `serve` nor `config check` said why
    providers = {"openai": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}
    config = GatewayConfig.model_validate({
        "providers": providers, "mcp_servers": [{"name": "git", "url": "http://127.0.0.1:9000/mcp"}]})
    assert sr.mcp_line(config) == "taskgate: MCP servers: /mcp/git → http://127.0.0.1:9000/mcp"
    assert sr.no_models_warning(config) == (
        "taskgate: warning: the configuration has no models table, so every model call answers 404 "
        "model_not_found (add models: docs/configuration.md)")
    routed = GatewayConfig.model_validate({"providers": providers, "models": [{"name": "*", "provider": "openai"}]})
    assert (sr.mcp_line(routed), sr.no_models_warning(routed)) == (None, None)


def test_the_run_variables_are_no_unknown_settings() -> None:
    assert sr.unknown_variables(["TASKGATE_TOKEN", "TASKGATE_RUN", "TASKGATE_TASK_ID"], KNOWN) == []


def test_help_lists_every_command_whole() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    text = result.output.split("Commands:")[1]
    assert "..." not in text and "``" not in result.output, result.output
    for command in ("config", "demo", "migrate", "run", "serve", "tasks", "upstream"):
        assert f"\n  {command} " in text, command
    tasks_help = CliRunner().invoke(main, ["tasks", "--help"], terminal_width=80).output
    assert "..." not in tasks_help.split("Commands:")[1] and "and the lines to\n              export." in tasks_help


def test_version() -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"taskgate {version('taskgate')}"


def test_upstream_help_names_itself() -> None:
    run = subprocess.run([sys.executable, "-m", "app.cli", "upstream", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("usage: taskgate upstream"), run.stdout


def test_limit_help_says_what_none_does() -> None:
    create = CliRunner().invoke(main, ["tasks", "create", "--help"], terminal_width=200).output
    update = CliRunner().invoke(main, ["tasks", "update", "--help"], terminal_width=200).output
    assert "removes" not in create and "Absent or 'none': no limit." in create
    assert "'none' removes this limit." in update and "--cost-limit" in create
    # a task without a wait of its own waits TASKGATE_COST_WAIT_S, not forever
    for text in (create, update):
        wait = text[text.index("--cost-wait"):].split("\n  -", 1)[0]
        assert "TASKGATE_COST_WAIT_S" in wait and "no limit" not in wait and "removes this limit" not in wait, wait
