"""PgBouncer (Debian's ``pgbouncer`` binary) in front of a test database.

    with pgbouncer(database_url) as bouncer_url:   # transaction mode, free port
        GatewayProcess(bouncer_url, upstream.base_url)

:func:`pgbouncer_binary` is ``None`` where PgBouncer is not installed; tests skip with
:data:`NOT_INSTALLED`. As root (CI), PgBouncer runs as the owner of the database's Unix
socket directory (the embedded PostgreSQL) or as ``postgres``/``nobody`` (it refuses to
run as root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy.engine import make_url

from tests.support import free_port

NOT_INSTALLED = "PgBouncer is not installed here (`apt-get install -y pgbouncer` as root; .ci/run does it)"


def pgbouncer_binary() -> str | None:
    """Path of the ``pgbouncer`` executable, or ``None``."""
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None)


def _run_as(socket_dir: str | None) -> str | None:
    """The user PgBouncer runs as when we are root (it refuses root), else ``None``."""
    if os.geteuid() != 0:
        return None
    if socket_dir:
        return pwd.getpwuid(os.stat(socket_dir).st_uid).pw_name
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("no unprivileged user to run PgBouncer as")


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited {proc.returncode}: {log.read_text(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on {port}: {log.read_text(errors='replace')}")


@contextmanager
def pgbouncer(database_url: str, *, pool_mode: str = "transaction", default_pool_size: int = 20,
              max_client_conn: int = 1000) -> Iterator[str]:
    """Run PgBouncer on a free 127.0.0.1 port in front of ``database_url`` (a
    ``postgresql+asyncpg://`` URL, TCP or Unix socket) and yield the
    ``postgresql+asyncpg://`` URL of the same database through it. Client
    authentication is off (``auth_type = any``); the server login is the URL's."""
    binary = pgbouncer_binary()
    if binary is None:
        raise RuntimeError(NOT_INSTALLED)
    url = make_url(database_url)
    socket_dir = url.query.get("host")
    server = [f"host={socket_dir or url.host or '127.0.0.1'}", f"port={url.port or 5432}",
              f"dbname={url.database}", f"user={url.username or 'postgres'}"]
    if url.password:
        server.append(f"password={url.password}")
    port = free_port()
    user = _run_as(socket_dir)
    with tempfile.TemporaryDirectory(prefix="taskgate-pgbouncer-") as tmp:
        work = Path(tmp)
        log = work / "pgbouncer.log"
        (work / "pgbouncer.ini").write_text("\n".join([
            "[databases]",
            f"{url.database} = {' '.join(server)}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = any",
            f"pool_mode = {pool_mode}",
            f"max_client_conn = {max_client_conn}",
            f"default_pool_size = {default_pool_size}",
            f"logfile = {log}",
            f"pidfile = {work / 'pgbouncer.pid'}",
            "",
        ]))
        if user is not None:
            shutil.chown(work, user)
            work.chmod(0o755)
        command = [binary, *(["-u", user] if user else []), str(work / "pgbouncer.ini")]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            _wait_for_port(port, proc, log, timeout=15)
            through = url.set(host="127.0.0.1", port=port, query={})
            yield through.render_as_string(hide_password=False)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
