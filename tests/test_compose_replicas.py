"""docker-compose.yml runs several gateway processes through PgBouncer (issue 12 §3).

No Docker engine here, so the wiring is checked by reading the files: the gateway's
database URL goes through the PgBouncer service in transaction mode, which forwards to
the PostgreSQL service with its credentials; migrations and LISTEN go to PostgreSQL
directly; the connection budget fits PostgreSQL's default ``max_connections``.
"""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import yaml
from sqlalchemy.engine import make_url

from app.db.pool import statement_cache_size
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_DEFAULT_MAX_CONNECTIONS = 100


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _mounted(service: dict, target: str) -> Path:
    for volume in service["volumes"]:
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == target:
            path = ROOT / source
            assert path.is_file(), f"{source} is mounted but missing"
            return path
    raise AssertionError(f"nothing mounted at {target}")


def _ini() -> tuple[configparser.ConfigParser, dict]:
    bouncer = _compose()["services"]["pgbouncer"]
    ini_path = bouncer["command"][-1]
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
    ini.read_string(_mounted(bouncer, ini_path).read_text())
    return ini, bouncer


def test_gateway_workers_reach_postgres_through_pgbouncer_in_transaction_mode():
    services = _compose()["services"]
    gateway, pg_env = services["gateway"], services["postgres"]["environment"]
    env = gateway["environment"]
    ini, bouncer = _ini()
    assert ini["pgbouncer"]["pool_mode"] == "transaction"
    url = make_url(env["TASKGATE_DATABASE_URL"])
    assert url.host == "pgbouncer" and url.port == int(ini["pgbouncer"]["listen_port"])
    target = dict(kv.split("=", 1) for kv in shlex.split(ini["databases"][url.database]))
    assert (target["host"], int(target["port"])) == ("postgres", 5432)
    assert (target["user"], target["password"], target["dbname"]) == (
        pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"], pg_env["POSTGRES_DB"])
    assert (url.username, url.password) == (target["user"], target["password"])
    userlist = _mounted(bouncer, ini["pgbouncer"]["auth_file"]).read_text()
    assert f'"{url.username}" "{url.password}"' in userlist
    assert gateway["depends_on"]["pgbouncer"]
    assert bouncer["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_migrations_and_listen_bypass_pgbouncer():
    services = _compose()["services"]
    env = services["gateway"]["environment"]
    direct = services["migrate"]["environment"]["TASKGATE_DATABASE_URL"]
    assert make_url(direct).host == "postgres" and make_url(direct).port == 5432
    assert env["TASKGATE_MIGRATION_DATABASE_URL"] == direct
    assert env["TASKGATE_LISTEN_DATABASE_URL"] == direct
    assert env["TASKGATE_MIGRATE_ON_START"] == "false"


def test_several_workers_fit_the_connection_budget():
    gateway = _compose()["services"]["gateway"]
    command = gateway["command"]
    assert command[:2] == ["taskgate", "serve"] and "--workers" in command
    default = command[command.index("--workers") + 1]  # "${TASKGATE_WORKERS:-4}"
    workers = int(default.rsplit(":-", 1)[1].rstrip("}"))
    assert workers >= 2
    ini, _ = _ini()
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    # every worker: a pool of client connections to PgBouncer, one direct LISTEN connection
    assert workers * settings.database_pool_size <= int(ini["pgbouncer"]["max_client_conn"])
    assert int(ini["pgbouncer"]["default_pool_size"]) + workers + 1 <= POSTGRES_DEFAULT_MAX_CONNECTIONS
    assert statement_cache_size(settings, direct=False) == 0  # named statements break transaction mode
