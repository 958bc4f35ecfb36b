"""Stopping the gateways stops the embedded postmaster they started or restarted (issue 21,
item 7). Real processes: ``taskgate serve`` on the embedded database, the postmaster killed
with ``kill -9`` and restarted by a gateway's supervisor, then the gateways stopped.

The rule (docs/faults.md): the last live gateway on a data directory stops the server at
exit, whichever process started the postmaster then running; a gateway that died without
exiting (``kill -9``) does not keep it alive."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from app.db import embedded
from tests.support import GatewayProcess

pytestmark = pytest.mark.timeout(300)


def postgres_processes(pgdata: Path) -> list[int]:
    """Pids of the postmaster and its backends of ``pgdata`` (found by ``-D`` in their
    command line for the postmaster, by parent for the rest)."""
    found: list[int] = []
    for process in psutil.process_iter(["name", "cmdline", "ppid"]):
        try:
            if process.info["name"] == "postgres" and str(pgdata) in " ".join(process.info["cmdline"] or []):
                found.append(process.pid)
                found.extend(child.pid for child in process.children(recursive=True))
        except psutil.Error:
            continue
    return sorted(set(found))


def kill_and_wait_for_restart(pgdata: Path, timeout_s: float = 90) -> int:
    """``kill -9`` the postmaster, return the pid of the one a supervisor started again."""
    old = embedded.postmaster_pid(pgdata)
    assert old is not None
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = embedded.postmaster_pid(pgdata)
        if new is not None and new != old and embedded.is_running(pgdata):
            return new
        time.sleep(0.2)
    raise AssertionError("the supervisor did not restart the postmaster")


def wait_until_gone(pgdata: Path, timeout_s: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := postgres_processes(pgdata)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def serves(gateway: GatewayProcess, timeout_s: float = 60) -> bool:
    """Whether the gateway's ``/readyz`` answers 200 (database reachable) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(gateway.url + "/readyz", timeout=3).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def _cleanup(pgdata: Path, *gateways: GatewayProcess) -> None:
    for gateway in gateways:
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait()
    for pid in postgres_processes(pgdata):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_sigterm_stops_a_postmaster_the_supervisor_restarted(upstream, tmp_path):
    gateway = GatewayProcess(None, upstream.base_url, TASKGATE_DATA_DIR=str(tmp_path)).start(timeout=90)
    pgdata = embedded.pgdata_dir(tmp_path)
    try:
        restarted = kill_and_wait_for_restart(pgdata)
        assert serves(gateway)
        assert restarted in postgres_processes(pgdata)
        gateway.stop()
        assert gateway.proc is not None and gateway.proc.returncode == 0, gateway.output()
        assert wait_until_gone(pgdata) == [], gateway.output()
    finally:
        _cleanup(pgdata, gateway)


def test_the_last_live_gateway_out_stops_it_even_after_a_sibling_was_killed(upstream, tmp_path):
    env = {"TASKGATE_DATA_DIR": str(tmp_path)}
    first = GatewayProcess(None, upstream.base_url, **env).start(timeout=90)
    second = GatewayProcess(None, upstream.base_url, **env).start(timeout=90)
    third = GatewayProcess(None, upstream.base_url, **env).start(timeout=90)
    pgdata = embedded.pgdata_dir(tmp_path)
    try:
        kill_and_wait_for_restart(pgdata)
        assert serves(first) and serves(second) and serves(third)
        first.stop()  # not the last one: the others keep their database
        time.sleep(1.0)
        assert embedded.is_running(pgdata)
        assert serves(second, timeout_s=10)
        assert second.proc is not None
        second.proc.kill()  # dies without detaching: must not keep the server alive
        second.proc.wait()
        third.stop()
        assert third.proc is not None and third.proc.returncode == 0, third.output()
        assert wait_until_gone(pgdata) == [], third.output()
    finally:
        _cleanup(pgdata, first, second, third)
