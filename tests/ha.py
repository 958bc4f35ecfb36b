"""A highly available PostgreSQL on one machine: pg_auto_failover's monitor, a primary and
a synchronous standby, three local instances on free ports and data directories of their
own (Debian package ``postgresql-15-auto-failover``; ``/usr/bin/pg_autoctl``).

    with ha_cluster() as cluster:            # started; stopped and deleted after
        cluster.url                          # ...@h:p1,h:p2/taskgate?target_session_attrs=read-write
        cluster.kill_primary_postmaster()    # kill -9 of the primary's postmaster
        cluster.perform_failover()           # a clean switchover (pg_autoctl perform failover)

Or by hand, the one command (the cluster keeps running until ``down``)::

    python -m tests.ha up /tmp/taskgate-ha     # prints the database URL
    python -m tests.ha state /tmp/taskgate-ha
    python -m tests.ha down /tmp/taskgate-ha

Replication is synchronous: pg_auto_failover sets ``synchronous_standby_names = 'ANY 1
(pgautofailover_standby_N)'`` on the primary while its standby is healthy, and
``synchronous_commit`` stays ``on`` (docs/scaling.md, "High availability"): a commit is
acknowledged once the standby has its WAL on disk. When the standby is unhealthy the
monitor moves the primary to ``wait_primary`` and turns synchronous replication off (the
primary keeps serving; a failover needs a standby that was in sync).

Every process is ``pg_autoctl run`` (one per instance, in a session of its own) under the
``postgres`` OS user when we are root (PostgreSQL refuses root); ``pg_autoctl``'s own
configuration and state live under the cluster's directory (``XDG_*``), never under the
user's home. :meth:`HACluster.stop` stops the keepers and the monitor (they stop their
PostgreSQL), then kills whatever is left; nothing outlives the ``with`` block.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import psutil

from tests.support import free_port

NOT_INSTALLED = ("pg_auto_failover is not installed here (`apt-get install -y postgresql-15-auto-failover` "
                 "as root; .ci/run does it)")
DATABASE = "taskgate"
#: Monitor states of a node that takes writes.
SERVING = ("primary", "wait_primary")
#: Monitor settings that make it notice an unhealthy node in ~3 s instead of ~20 s (tests).
FAST_MONITOR = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
}


def pg_autoctl_binary() -> str | None:
    """Path of ``pg_autoctl``, or ``None``."""
    return shutil.which("pg_autoctl") or (
        "/usr/bin/pg_autoctl" if os.access("/usr/bin/pg_autoctl", os.X_OK) else None)


def pg_ctl() -> Path | None:
    """``pg_ctl`` of the PostgreSQL that pg_auto_failover was built for (15), or ``None``."""
    path = Path("/usr/lib/postgresql/15/bin/pg_ctl")
    return path if path.exists() else None


def available() -> bool:
    return pg_autoctl_binary() is not None and pg_ctl() is not None


@dataclass
class Instance:
    """One ``pg_autoctl run``: the monitor or a node (``name``), its port and data directory."""

    name: str
    port: int
    pgdata: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


class HACluster:
    """A monitor and two nodes under ``root`` (see the module docstring). ``url`` is the
    multi-host ``postgresql+asyncpg://`` URL of database :data:`DATABASE` on the nodes
    (``target_session_attrs=read-write``: a connection finds the primary)."""

    def __init__(self, root: Path, *, fast_monitor: bool = True) -> None:
        binary, ctl = pg_autoctl_binary(), pg_ctl()
        if binary is None or ctl is None:
            raise RuntimeError(NOT_INSTALLED)
        self.binary, self.pg_ctl = binary, str(ctl)
        self.root = root
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            pwd.getpwnam(self.user)
            shutil.chown(root, self.user)
        os.chmod(root, 0o755)
        self.monitor = Instance("monitor", free_port(), root / "monitor")
        self.nodes = [Instance(f"node_{n}", free_port(), root / f"node_{n}") for n in ("a", "b")]
        self.fast_monitor = fast_monitor
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": str(root),
                    "XDG_CONFIG_HOME": str(root / "xdg-config"), "XDG_DATA_HOME": str(root / "xdg-data"),
                    "XDG_RUNTIME_DIR": str(root / "xdg-run")}
        for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR"):
            Path(self.env[key]).mkdir(mode=0o700, exist_ok=True)
            if self.user:
                shutil.chown(self.env[key], self.user)
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        self.url = f"postgresql+asyncpg://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"
        self.monitor_uri = f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    # -- processes -------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run([self.binary, *args], env=self.env, user=self.user, cwd="/",
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} exited {done.returncode}:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout

    def _serve(self, instance: Instance) -> None:
        log = open(self.root / f"{instance.name}.log", "ab")
        instance.proc = subprocess.Popen([self.binary, "run", "--pgdata", str(instance.pgdata)], env=self.env,
                                         user=self.user, cwd="/", stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        log.close()

    def log(self, instance: Instance, size: int = 4000) -> str:
        try:
            return (self.root / f"{instance.name}.log").read_text(errors="replace")[-size:]
        except OSError:
            return ""

    # -- start and stop --------------------------------------------------------------

    def start(self, timeout: float = 180) -> None:
        """Create and run the monitor, then the primary, then the standby; return once
        the monitor reports a primary and a secondary."""
        deadline = time.monotonic() + timeout
        self._run("create", "monitor", "--pgctl", self.pg_ctl, "--pgdata", str(self.monitor.pgdata),
                  "--pgport", str(self.monitor.port), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
        if self.fast_monitor:
            with (self.monitor.pgdata / "postgresql.conf").open("a") as conf:
                conf.write("".join(f"\n{k} = {v}" for k, v in FAST_MONITOR.items()) + "\n")
        self._serve(self.monitor)
        self._wait(lambda: self._monitor_ready(), deadline, "the monitor to accept connections")
        for i, node in enumerate(self.nodes):
            self._run("create", "postgres", "--pgctl", self.pg_ctl, "--pgdata", str(node.pgdata),
                      "--pgport", str(node.port), "--pghost", "127.0.0.1", "--listen", "127.0.0.1",
                      "--hostname", "127.0.0.1", "--name", node.name, "--auth", "trust", "--no-ssl",
                      "--monitor", self.monitor_uri, "--dbname", DATABASE, "--username", "postgres")
            self._serve(node)
            want = {"single"} if i == 0 else {"primary", "secondary"}
            self._wait(lambda: self._settled(want), deadline, f"{node.name} to join ({want})")

    def stop(self) -> None:
        """Stop the keepers, then the monitor (each stops its PostgreSQL); kill what is
        left after 30 s, postmasters included."""
        for instance in [*self.nodes, self.monitor]:
            if instance.proc is not None and instance.proc.poll() is None:
                instance.proc.send_signal(signal.SIGTERM)
        for instance in [*self.nodes, self.monitor]:
            if instance.proc is not None:
                try:
                    instance.proc.wait(30)
                except subprocess.TimeoutExpired:
                    _kill_group(instance.proc.pid)
                    instance.proc.wait()
            pid = instance.postmaster_pid()
            if pid is not None and _alive(pid):
                _kill(pid)

    # -- state -----------------------------------------------------------------------

    def _monitor_ready(self) -> bool:
        try:
            self._run("show", "state", "--pgdata", str(self.monitor.pgdata), timeout=10)
            return True
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    def state(self) -> list[dict]:
        """The monitor's view: one dict per node (``nodename``, ``nodeport``,
        ``current_group_state``, ``assigned_group_state``, ``health``, ...)."""
        out = self._run("show", "state", "--json", "--pgdata", str(self.monitor.pgdata), timeout=15)
        nodes: list[dict] = json.loads(out) if out.strip() else []
        return nodes

    def _settled(self, want: set[str]) -> bool:
        try:
            nodes = self.state()
        except (RuntimeError, ValueError, subprocess.TimeoutExpired):
            return False
        states = {n["current_group_state"] for n in nodes}
        return (len(nodes) == len(want) and states == want
                and all(n["current_group_state"] == n["assigned_group_state"] for n in nodes))

    def healthy(self) -> bool:
        """A primary and a secondary, each in the state the monitor assigned."""
        return self._settled({"primary", "secondary"})

    def wait_healthy(self, timeout: float = 120) -> None:
        self._wait(self.healthy, time.monotonic() + timeout, "a primary and a secondary again")

    def primary(self) -> Instance:
        """The node the monitor reports (and assigns) as primary (or ``wait_primary``)."""
        for n in self.state():  # wait_primary: a primary whose standby is gone (still writable)
            if n["current_group_state"] == n["assigned_group_state"] and n["current_group_state"] in SERVING:
                return next(i for i in self.nodes if i.port == n["nodeport"])
        raise RuntimeError(f"no primary now: {self.state()}")

    def _wait(self, check: Callable[[], bool], deadline: float, what: str) -> None:
        while not check():
            for instance in [self.monitor, *self.nodes]:
                if instance.proc is not None and instance.proc.poll() is not None:
                    raise RuntimeError(f"pg_autoctl {instance.name} exited: {self.log(instance)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: "
                                   + "\n".join(self.log(i, 1500) for i in [self.monitor, *self.nodes]))
            time.sleep(0.25)

    # -- faults ----------------------------------------------------------------------

    def kill_primary_postmaster(self) -> Instance:
        """``kill -9`` of the primary's postmaster (its keeper restarts it; the monitor
        fails over to the standby meanwhile). Returns the node that was primary."""
        node = self.primary()
        pid = node.postmaster_pid()
        assert pid is not None, f"{node.name} has no postmaster.pid"
        os.kill(pid, signal.SIGKILL)
        return node

    def kill_primary_node(self) -> Instance:
        """The primary's machine dies: ``kill -9`` of its keeper (``pg_autoctl run`` and
        its services) and its PostgreSQL, nothing restarts them; the monitor fails over
        once its health checks give up on the node. :meth:`rejoin` brings it back."""
        node = self.primary()
        pid = node.postmaster_pid()
        assert node.proc is not None
        _kill_group(node.proc.pid)
        if pid is not None:
            _kill(pid)
        node.proc.wait()
        return node

    def rejoin(self, node: Instance) -> None:
        """Run a killed node's keeper again: it rewinds and follows the new primary."""
        deadline = time.monotonic() + 30
        while (pid := node.postmaster_pid()) is not None and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._serve(node)

    @contextmanager
    def standby_paused(self) -> Iterator[Instance]:
        """``SIGSTOP`` the standby's PostgreSQL (postmaster and children, not its keeper)
        for the block, ``SIGCONT`` after: the primary's commits wait for it meanwhile (until
        the monitor, finding it unhealthy, turns synchronous replication off)."""
        primary = self.primary()
        standby = next(n for n in self.nodes if n is not primary)
        pid = standby.postmaster_pid()
        assert pid is not None, f"{standby.name} has no postmaster.pid"
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
        try:
            yield standby
        finally:
            for proc in procs:
                try:
                    proc.send_signal(signal.SIGCONT)
                except psutil.NoSuchProcess:
                    pass

    def fault(self, case: str, timeout: float = 180) -> bool:
        """Apply one fault to the cluster and wait until a primary serves with a healthy
        standby again; returns whether the primary moved to the other node. ``case``:
        ``kill_postmaster`` (the keeper restarts it: the monitor fails over, or the same
        node comes back first), ``kill_node`` (keeper and PostgreSQL; rejoins after the
        failover), ``perform_failover`` or ``standby_paused`` (6 s)."""
        before = self.primary()
        old_pid = before.postmaster_pid()
        deadline = time.monotonic() + timeout
        if case == "standby_paused":
            with self.standby_paused():
                time.sleep(6)
            self.wait_healthy(timeout)
            return False
        killed: Instance | None = None
        if case == "kill_postmaster":
            self.kill_primary_postmaster()
        elif case == "kill_node":
            killed = self.kill_primary_node()
        else:
            self.perform_failover()
        while True:
            try:
                now = self.primary()
                if now is not before or (case == "kill_postmaster" and before.postmaster_pid() != old_pid):
                    break
            except RuntimeError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no primary after {case}: {self.state()}")
            time.sleep(0.25)
        if killed is not None:
            self.rejoin(killed)
        self.wait_healthy(max(1.0, deadline - time.monotonic()))
        return now is not before

    def perform_failover(self, timeout: float = 120) -> None:
        """``pg_autoctl perform failover``: a clean switchover; returns once it is done."""
        self._run("perform", "failover", "--pgdata", str(self.monitor.pgdata), timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_group(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


@contextmanager
def ha_cluster(*, fast_monitor: bool = True) -> Iterator[HACluster]:
    """A started :class:`HACluster` in a temporary directory, stopped and deleted after."""
    with tempfile.TemporaryDirectory(prefix="taskgate-ha-") as tmp:
        cluster = HACluster(Path(tmp), fast_monitor=fast_monitor)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
            if cluster.user:  # let the TemporaryDirectory cleanup remove the postgres-owned files
                subprocess.run(["chown", "-R", str(os.geteuid()), tmp], check=False)


def _main(argv: list[str]) -> int:
    """``python -m tests.ha up|state|down DIR``."""
    if len(argv) != 2 or argv[0] not in ("up", "state", "down"):
        print(__doc__.split("Or by hand")[1].split("Replication")[0].strip(), file=sys.stderr)
        return 2
    command, root = argv[0], Path(argv[1]).resolve()
    if command == "up":
        root.mkdir(parents=True, exist_ok=True)
        cluster = HACluster(root, fast_monitor=False)
        cluster.start()
        (root / "cluster.json").write_text(json.dumps({
            "url": cluster.url, "pids": [i.proc.pid for i in [cluster.monitor, *cluster.nodes] if i.proc],
            "pgdata": [str(i.pgdata) for i in [cluster.monitor, *cluster.nodes]]}))
        print(cluster.url)
        return 0
    saved = json.loads((root / "cluster.json").read_text())
    if command == "state":
        subprocess.run([pg_autoctl_binary() or "pg_autoctl", "show", "state", "--pgdata", saved["pgdata"][0]],
                       env={**os.environ, "XDG_CONFIG_HOME": str(root / "xdg-config"),
                            "XDG_DATA_HOME": str(root / "xdg-data"), "XDG_RUNTIME_DIR": str(root / "xdg-run")},
                       user="postgres" if os.geteuid() == 0 else None, check=False)
        return 0
    for pid in reversed(saved["pids"]):  # the nodes first, then the monitor
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            _kill_group(pid)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
