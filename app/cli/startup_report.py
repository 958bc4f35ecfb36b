"""What ``taskgate serve`` says about its configuration when it starts (pure functions).

- :func:`unknown_variables`: ``TASKGATE_*`` names in the environment (or ``.env``) that
  are no setting, each with the closest known name (:func:`difflib.get_close_matches`),
  e.g. ``TASKGATE_UPSTREAM_BASEURL`` → ``TASKGATE_UPSTREAM_BASE_URL``. pydantic-settings
  ignores them, so a misspelling would otherwise pass silently.
- :func:`warning_lines`: one ``taskgate: warning: ...`` line per unknown name.
- :func:`providers_line`: where requests go (each provider, its wire format and base
  URL, whether it has a key; never the key).
- :func:`mcp_line`: the MCP servers it relays (``/mcp/<name>`` and the server's URL).
- :func:`no_models_warning`: a configuration file with providers but no ``models``
  table, which routes no model call anywhere.
- :func:`sources_line`: where the configuration came from (environment variables by
  name, the ``.env`` file, ``TASKGATE_CONFIG``), values never shown.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path

from app.config import GatewayConfig

PREFIX = "TASKGATE_"

#: ``TASKGATE_*`` names read outside :class:`app.settings.Settings`: the CLI's gateway URL,
#: the budget key ``taskgate run`` reads and the task id, token or run name it gives the agent,
#: docker compose's worker count, and the test and benchmark suites' own switches.
OTHER_VARIABLES = frozenset({
    "TASKGATE_URL", "TASKGATE_TASK_ID", "TASKGATE_TOKEN", "TASKGATE_BUDGET_KEY", "TASKGATE_RUN",
    "TASKGATE_WORKERS",
    "TASKGATE_TEST_DATABASE_URL",
    "TASKGATE_UPDATE_SCREENSHOTS", "TASKGATE_FUZZ_EXAMPLES", "TASKGATE_BENCH_LITELLM_PYTHON",
})


def known_variables(setting_fields: Iterable[str]) -> frozenset[str]:
    """Every ``TASKGATE_*`` name taskgate reads: one per setting field, plus :data:`OTHER_VARIABLES`."""
    return frozenset(PREFIX + f.upper() for f in setting_fields) | OTHER_VARIABLES


def unknown_variables(names: Iterable[str], known: frozenset[str]) -> list[tuple[str, str | None]]:
    """``(name, closest known name or None)`` for each ``TASKGATE_*`` name not in ``known``,
    sorted. Names are compared case-insensitively, as pydantic-settings reads them."""
    upper_known = sorted(known)
    out = []
    for name in sorted(set(names)):
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in known:
            continue
        close = difflib.get_close_matches(upper, upper_known, n=1, cutoff=0.75)
        out.append((name, close[0] if close else None))
    return out


def warning_lines(unknown: list[tuple[str, str | None]]) -> list[str]:
    """One line per unknown name: ``taskgate: warning: TASKGATE_X is not a setting and is
    ignored (did you mean TASKGATE_Y?)``."""
    return [f"taskgate: warning: {name} is not a setting and is ignored"
            + (f" (did you mean {close}?)" if close else " (docs/configuration.md lists them)")
            for name, close in unknown]


def providers_line(config: GatewayConfig) -> str:
    """``taskgate: providers: openai (openai) → https://api.openai.com/v1, key set; ...``:
    each configured provider with its wire format, base URL and whether a key is set."""
    parts = [f"{name} ({p.kind}) → {p.base_url}, {'key set' if p.api_key else 'no key'}"
             for name, p in config.providers.items()]
    return "taskgate: providers: " + "; ".join(parts)


def mcp_line(config: GatewayConfig) -> str | None:
    """``taskgate: MCP servers: /mcp/git → http://127.0.0.1:9000/mcp; ...``, or ``None``
    when the configuration has none."""
    if not config.mcp_servers:
        return None
    return "taskgate: MCP servers: " + "; ".join(f"/mcp/{s.name} → {s.url}" for s in config.mcp_servers)


def no_models_warning(config: GatewayConfig) -> str | None:
    """A warning when the configuration has providers but an empty ``models`` table: every
    model call would answer 404 ``model_not_found`` (an MCP-only file looks like this)."""
    if config.models or not config.providers:
        return None
    return ("taskgate: warning: the configuration has no models table, so every model call answers 404 "
            "model_not_found (add models: docs/configuration.md)")


def sources_line(environ: Mapping[str, str], known: frozenset[str], env_file: Path | None,
                 config_path: str | None) -> str:
    """``taskgate: configuration from ...``: the ``TASKGATE_*`` variables set (names only),
    the ``.env`` file when one was read, and ``TASKGATE_CONFIG``; otherwise "defaults"."""
    names = sorted(n for n in environ if n.upper() in known and n.upper() not in OTHER_VARIABLES)
    parts = []
    if names:
        parts.append("environment (" + ", ".join(names) + ")")
    if env_file is not None:
        parts.append(f"{env_file}")
    parts.append(f"providers file {config_path}" if config_path
                 else "no providers file (TASKGATE_CONFIG unset: TASKGATE_UPSTREAM_*, TASKGATE_ANTHROPIC_*)")
    return "taskgate: configuration from " + ", ".join(parts) + "; the rest defaults"


def env_file_names(path: Path) -> list[str]:
    """The variable names a ``.env`` file sets (python-dotenv's reading, as pydantic-settings')."""
    from dotenv import dotenv_values

    return list(dotenv_values(path))
