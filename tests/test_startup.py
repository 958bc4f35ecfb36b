"""Start-up and configuration errors: `taskgate serve` exits non-zero with one line on
stderr naming the setting, never a traceback; accepted spellings start normally."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.db.urls import describe, normalize_database_url
from app.settings import Settings, env_list
from tests.support import ADMIN_TOKEN, GatewayProcess, free_port


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TASKGATE_")}
    full.update({"TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN, "TASKGATE_MIGRATE_ON_START": "false", **env})
    return subprocess.run([sys.executable, "-m", "app.cli", "serve", *args], env=full,
                          capture_output=True, text=True, timeout=120)


def assert_one_line(run: subprocess.CompletedProcess, *words: str) -> str:
    assert run.returncode != 0, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("taskgate: ") and "Traceback" not in run.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert "listening on" not in run.stderr + run.stdout
    return lines[0]


def other_database(database_url: str, name: str) -> str:
    return make_url(database_url).set(database=name).render_as_string(hide_password=False)


@pytest.mark.parametrize("env,words", [
    ({"TASKGATE_PORT": "abc"}, ["TASKGATE_PORT", "integer"]),
    ({"TASKGATE_PORT": "70000"}, ["TASKGATE_PORT", "65535"]),
    ({"TASKGATE_PORT": "0"}, ["TASKGATE_PORT"]),
    ({"TASKGATE_DATABASE_URL": "mysql://root:hunter2@db/taskgate"}, ["TASKGATE_DATABASE_URL", "postgresql://"]),
    ({"TASKGATE_DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:9/taskgate"},
     ["TASKGATE_DATABASE_URL", "cannot reach PostgreSQL at 127.0.0.1:9/taskgate"]),
    ({"TASKGATE_SESSION_HEADERS": "[not json"}, ["TASKGATE_SESSION_HEADERS", "comma-separated"]),
    ({"TASKGATE_PER_TOOL_THRESHOLDS": '{"check_status": 0}'}, ["TASKGATE_PER_TOOL_THRESHOLDS", ">= 1"]),
    ({"TASKGATE_CYCLE_REPEATS": "1"}, ["TASKGATE_CYCLE_REPEATS", ">= 2"]),
    ({"TASKGATE_PER_TOOL_THRESHOLDS": "check_status=3"}, ["TASKGATE_PER_TOOL_THRESHOLDS", "JSON"]),
], ids=lambda v: str(v)[:60])
def test_bad_setting_is_one_line_naming_it(env, words) -> None:
    line = assert_one_line(serve(env, "--port", str(free_port())), *words)
    assert "hunter2" not in line and "pw@" not in line  # never the password


def test_missing_database_is_one_line(database_url) -> None:
    url = other_database(database_url, "taskgate_no_such_database")
    assert_one_line(serve({"TASKGATE_DATABASE_URL": url}, "--port", str(free_port())),
                    "TASKGATE_DATABASE_URL", "taskgate_no_such_database", "does not exist")


def test_port_in_use_is_one_line_before_listening(database_url) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = serve({"TASKGATE_DATABASE_URL": database_url}, "--port", str(port))
    assert_one_line(run, "TASKGATE_PORT", f"127.0.0.1:{port}", "already in use")


def test_cli_port_out_of_range_is_refused() -> None:
    run = serve({}, "--port", "99999")
    assert run.returncode == 2 and "99999" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_plain_postgresql_urls_are_accepted(database_url, upstream, scheme) -> None:
    url = scheme + "://" + database_url.split("://", 1)[1]
    with GatewayProcess(url, upstream.base_url, TASKGATE_MIGRATE_ON_START="true") as gw:  # alembic too
        r = httpx.get(gw.url + "/admin/tasks", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("raw,expected", [
    ("x-foo", ["x-foo"]), ("x-foo, X-Bar,", ["x-foo", "x-bar"]), ('["x-foo", "x-bar"]', ["x-foo", "x-bar"]),
])
def test_session_headers_take_a_comma_list_or_json(monkeypatch, raw, expected) -> None:
    monkeypatch.setenv("TASKGATE_SESSION_HEADERS", raw)
    assert list(Settings().session_headers) == expected
    assert env_list("a,,b ") == ["a", "b"]


@pytest.mark.parametrize("url,expected", [
    ("postgresql://u:p@h:5432/db", "postgresql+asyncpg://u:p@h:5432/db"),
    ("postgres://u@h/db", "postgresql+asyncpg://u@h/db"),
    ("postgresql+asyncpg://u@/db?host=/run/pg", "postgresql+asyncpg://u@/db?host=/run/pg"),
    ("POSTGRES://u@h/db", "postgresql+asyncpg://u@h/db"),
])
def test_database_urls_are_normalised(url, expected) -> None:
    assert normalize_database_url(url) == expected


@pytest.mark.parametrize("url", ["mysql://u:secret@h/db", "sqlite:///x.db", "h:5432/db", "postgresql://"])
def test_other_urls_are_refused_without_the_password(url) -> None:
    with pytest.raises(ValueError) as info:
        normalize_database_url(url)
    assert "secret" not in str(info.value)
    assert describe("postgresql://u:secret@h:5/db") == "h:5/db"
