"""A private, throwaway PostgreSQL cluster from the Debian binaries
(``/usr/lib/postgresql/*/bin``) on a free TCP port, for tests that crash the server.

The machine's shared PostgreSQL on :5432 is never touched: CI's server run needs it.
As root, the cluster runs as ``postgres`` (PostgreSQL refuses root).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.support import free_port

NOT_INSTALLED = "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (apt-get install postgresql)"


def server_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb``, or ``None``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(found[-1]).parent if found else None


class Cluster:
    """One private cluster: :meth:`start`, :meth:`kill` (``SIGKILL`` of the postmaster),
    :meth:`stop`; ``url`` is its ``postgresql+asyncpg://`` URL (database ``postgres``)."""

    def __init__(self, root: Path) -> None:
        self.bin = server_bin()
        self.pgdata = root / "pgdata"
        self.port = free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(root, self.user)
        self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        assert self.bin is not None
        subprocess.run([str(self.bin / tool), *args], check=True, capture_output=True,
                       user=self.user, cwd="/")

    def start(self, timeout: float = 60) -> None:
        """Start the server; after a crash, retry while the dead postmaster is not reaped yet
        (PostgreSQL refuses to start while its pid exists, even as a zombie)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "-l",
                                 str(self.pgdata / "log"), "-o",
                                 f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.pgdata}", "start")
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def pid(self) -> int:
        return int((self.pgdata / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """``kill -9`` of the postmaster: a crash, then wait for its children to go."""
        os.kill(self.pid(), signal.SIGKILL)
        time.sleep(0.5)

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.pgdata), "-m", "immediate", "-w", "stop")
            except subprocess.CalledProcessError:
                pass


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """A started private cluster, stopped and deleted after."""
    with tempfile.TemporaryDirectory(prefix="taskgate-cluster-") as tmp:
        os.chmod(tmp, 0o755)
        cluster = Cluster(Path(tmp))
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
            if cluster.user:  # let the TemporaryDirectory cleanup remove the postgres-owned files
                subprocess.run(["chown", "-R", f"{os.geteuid()}", tmp], check=False)
