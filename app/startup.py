"""Start-up checks whose failures are one line naming the setting, never a traceback.

``taskgate serve`` (and ``migrate``) run these before anything starts:

- :func:`load_settings`: the environment parses (``TASKGATE_PORT=abc`` →
  ``TASKGATE_PORT: expects an integer ...``), and the loop-guard settings pass the
  detector's own checks.
- :func:`check_database`: the configured PostgreSQL answers (unreachable, missing
  database, wrong password each get their sentence).
- :func:`bind`: the listening address is free, before "listening on" is printed.

Each raises :class:`StartupError`; :func:`exit_on_error` prints ``taskgate: <line>``
on stderr and exits 2.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
from collections.abc import Callable, Coroutine
from contextlib import contextmanager
from typing import Any, Iterator

import asyncpg
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.db import sql
from app.db.pool import asyncpg_dsn
from app.db.urls import describe
from app.guard.detector import Thresholds
from app.settings import Settings

#: Exit status of a start-up error (2, like a usage error).
EXIT_STATUS = 2
#: The env var of each detector threshold, for Thresholds' error messages.
_THRESHOLD_SETTINGS = {"identical_streak": "TASKGATE_IDENTICAL_STREAK", "cycle_repeats": "TASKGATE_CYCLE_REPEATS",
                       "failure_streak": "TASKGATE_FAILURE_STREAK", "per_tool": "TASKGATE_PER_TOOL_THRESHOLDS",
                       "warn_after": "TASKGATE_LOOP_WARNING_AFTER", "tool_call_limit": "TASKGATE_TOOL_CALL_LIMIT"}


class StartupError(Exception):
    """A configuration or environment problem, as one line naming the setting."""


def env_name(field: str) -> str:
    return "TASKGATE_" + field.upper()


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def settings_error(exc: Exception) -> StartupError:
    """A pydantic-settings failure as one line naming the first bad ``TASKGATE_*``."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first.get("loc") else "settings"
        got = first.get("input")
        secret = any(word in field for word in ("url", "token", "key", "secret", "password"))
        shown = f", got {got!r}" if not secret and isinstance(got, (str, int, float)) \
            and len(str(got)) <= 100 else ""
        message = first.get("msg", "invalid").removeprefix("Value error, ")
        return StartupError(f"{env_name(field)}: {_one_line(message)}{shown}")
    if isinstance(exc, SettingsError):  # a complex value (list, dict) that is not JSON
        text = str(exc)
        field = text.split('"')[1] if text.count('"') >= 2 else "settings"
        return StartupError(f"{env_name(field)}: expects JSON (e.g. [\"a\", \"b\"] or {{\"a\": 1}}); "
                            f"{_one_line(text)}")
    return StartupError(_one_line(str(exc)))


def load_settings() -> Any:
    """The process settings (:func:`app.settings.get_settings`), checked: raises
    :class:`StartupError` for an environment that does not parse or thresholds the
    loop guard's detector refuses."""
    from app.settings import get_settings

    try:
        settings = get_settings()
    except (ValidationError, SettingsError) as exc:
        raise settings_error(exc) from None
    try:
        Thresholds(identical_streak=settings.identical_streak, cycle_repeats=settings.cycle_repeats,
                   failure_streak=settings.failure_streak, per_tool=settings.per_tool_thresholds,
                   tool_call_limit=settings.tool_call_limit,
                   warn_after=settings.loop_warning_after if settings.loop_warning else None)
    except ValueError as exc:
        label = str(exc).split(" ", 1)[0].split("[", 1)[0]
        raise StartupError(f"{_THRESHOLD_SETTINGS.get(label, 'TASKGATE_' + label.upper())}: {exc}") from None
    return settings


async def _probe(url: str, timeout_s: float) -> None:
    # no prepared statements: the URL may point at PgBouncer in transaction mode
    conn = await asyncpg.connect(asyncpg_dsn(url), timeout=timeout_s, statement_cache_size=0)
    try:
        await conn.execute(sql.statement("health_probe"))
    finally:
        await conn.close()


def check_database(url: str, timeout_s: float, setting: str = "TASKGATE_DATABASE_URL") -> None:
    """Connect once to ``url``; raise :class:`StartupError` saying why it failed."""
    where = describe(url)
    try:
        asyncio.run(asyncio.wait_for(_probe(url, timeout_s), timeout_s + 1))
    except asyncpg.InvalidCatalogNameError:
        raise StartupError(f"{setting}: database {where} does not exist (create it, or point "
                           "the URL at one that does)") from None
    except (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError) as exc:
        raise StartupError(f"{setting}: PostgreSQL at {where} refused the login: {_one_line(exc)}") from None
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reason = _one_line(exc) or type(exc).__name__
        raise StartupError(f"{setting}: cannot reach PostgreSQL at {where}: {reason}") from None


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds: ``SO_REUSEADDR``, inheritable
    by worker processes). Raises :class:`StartupError` when the address is taken or
    cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == 98 or "in use" in str(exc):
            raise StartupError(f"TASKGATE_PORT: {host}:{port} is already in use; stop what listens "
                               "there or choose another port (--port, TASKGATE_PORT)") from None
        if isinstance(exc, socket.gaierror):
            raise StartupError(f"TASKGATE_HOST: cannot resolve {host!r}: {exc.strerror}") from None
        raise StartupError(f"TASKGATE_HOST: cannot listen on {host}:{port}: "
                           f"{exc.strerror or _one_line(exc)}") from None
    sock.set_inheritable(True)
    return sock


@contextmanager
def exit_on_error() -> Iterator[None]:
    """Print a :class:`StartupError` as ``taskgate: <line>`` on stderr and exit 2."""
    try:
        yield
    except StartupError as exc:
        print(f"taskgate: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_STATUS)


def prepare_database(settings: Settings, resolve: Callable[[Settings], Coroutine[Any, Any, str]], *,
                     serving: bool = True) -> str:
    """Check the configured databases answer (the serving one unless ``serving`` is
    false, the migration one when migrating), then ``resolve(settings)`` (start the
    embedded one and migrate, see :func:`app.main.resolve_database`). Returns its URL;
    raises :class:`StartupError` naming the setting at fault."""
    if settings.database_url is not None:
        if serving or not settings.migration_database_url:
            check_database(settings.database_url, settings.database_timeout_s)
        if settings.migrate_on_start and settings.migration_database_url:
            check_database(settings.migration_database_url, settings.database_timeout_s,
                           "TASKGATE_MIGRATION_DATABASE_URL")
    try:
        return asyncio.run(resolve(settings))
    except Exception as exc:  # noqa: BLE001 - one line instead of a traceback
        first = _one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        if settings.database_url is None:
            raise StartupError(f"TASKGATE_DATA_DIR: the embedded PostgreSQL could not start under "
                               f"{settings.data_dir}: {first[:300]}") from None
        setting = "TASKGATE_MIGRATION_DATABASE_URL" if settings.migration_database_url else "TASKGATE_DATABASE_URL"
        raise StartupError(f"{setting}: migrating the database failed: {first[:300]}") from None


def open_metrics_warning(host: str, metrics_token: str | None) -> str | None:
    """The start-up line saying ``/metrics`` is open to the network: the gateway listens
    beyond loopback and ``TASKGATE_METRICS_TOKEN`` is unset (``None`` otherwise)."""
    if metrics_token:
        return None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (f"taskgate: warning: GET /metrics is open to anyone who can reach {host} (task ids, models, "
            "spend); set TASKGATE_METRICS_TOKEN to require a bearer token")


def serve(sock: socket.socket, *, host: str, port: int, workers: int, log_level: str,
          options: dict[str, Any]) -> None:
    """Run uvicorn on the already bound ``sock`` (one process, or ``workers``
    processes sharing it), with ``options`` (:func:`app.server.uvicorn_options`).
    Exits 3 when the application fails to start."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config("app.main:create_app", factory=True, host=host, port=port, workers=workers,
                            log_level=log_level, access_log=False, **options)
    if workers > 1:
        Multiprocess(config, sockets=[sock]).run()
        return
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    if not server.started:
        sys.exit(3)
