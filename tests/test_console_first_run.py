"""First run: the embedded default keeps its generated admin token in the data
directory (mode 0600) and says where; an explicit TASKGATE_ADMIN_TOKEN wins; the CLI
finds the token file of a local gateway by itself."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import httpx
from click.testing import CliRunner

from app.cli import main
from app.console import admin_token
from app.settings import Settings
from tests.support import GatewayProcess, stop_embedded


def test_token_file_created_once_with_mode_0600(tmp_path):
    path = tmp_path / "data" / "admin_token"
    token, created = admin_token.load_or_create(path)
    assert created and token.startswith("tgadm-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert admin_token.load_or_create(path) == (token, False)
    os.chmod(path, 0o644)
    assert admin_token.load_or_create(path) == (token, False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a loosened file is tightened again


def test_explicit_token_wins_and_external_database_gets_a_run_token(tmp_path):
    explicit = Settings(admin_token="mine", data_dir=tmp_path)
    assert admin_token.ensure(explicit) is None and explicit.admin_token == "mine"
    assert not (tmp_path / "admin_token").exists()
    external = Settings(admin_token=None, data_dir=tmp_path, database_url="postgresql+asyncpg://x@h/db")
    line = admin_token.ensure(external)
    assert external.admin_token and external.admin_token in line and "for this run" in line
    assert not (tmp_path / "admin_token").exists()
    embedded = Settings(admin_token=None, data_dir=tmp_path, database_url=None)
    line = admin_token.ensure(embedded)
    assert str(tmp_path / "admin_token") in line and embedded.admin_token not in line


def test_embedded_gateway_keeps_its_token_across_restarts(upstream):
    # its own temporary directory, not pytest's tmp_path: concurrent pytest sessions on
    # one machine prune each other's old basetemp directories under a running PostgreSQL
    with tempfile.TemporaryDirectory(prefix="taskgate-first-run-") as tmp:
        _restart_keeps_token(upstream, Path(tmp))


def _restart_keeps_token(upstream, tmp_path: Path) -> None:
    def start() -> GatewayProcess:
        gw = GatewayProcess(None, upstream.base_url, TASKGATE_DATA_DIR=str(tmp_path))
        del gw.env["TASKGATE_ADMIN_TOKEN"]
        return gw.start(timeout=90)

    path = tmp_path / "admin_token"
    gw = start()
    try:
        assert f"saved it to {path.resolve()} (mode 0600)" in gw.output()
        token = path.read_text().strip()
        assert token not in gw.output()  # the file holds it; the log does not
        r = httpx.get(gw.url + "/admin/tasks", headers={"authorization": f"Bearer {token}"})
        assert r.status_code == 200
        # the CLI on the same machine finds the token file by itself
        env = {"TASKGATE_URL": gw.url, "TASKGATE_DATA_DIR": str(tmp_path), "TASKGATE_ADMIN_TOKEN": ""}
        result = CliRunner().invoke(main, ["tasks", "create", "--id", "first-run"], env=env)
        assert result.exit_code == 0, result.output
    finally:
        gw.stop()
    gw = start()
    try:
        assert f"admin token read from {path.resolve()}" in gw.output()
        r = httpx.get(gw.url + "/admin/tasks/first-run", headers={"authorization": f"Bearer {token}"})
        assert r.status_code == 200
    finally:
        gw.stop()
        stop_embedded(tmp_path)
