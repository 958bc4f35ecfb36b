"""The Dockerfile and docker-compose.yml cannot run here (no Docker engine), so their
wiring is checked against the settings instead."""

from __future__ import annotations

from pathlib import Path

import yaml
from sqlalchemy.engine import make_url

from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_services_and_variables_match_settings():
    compose = _compose()
    services = compose["services"]
    default = {name for name, service in services.items() if not service.get("profiles")}
    assert default == {"postgres", "pgbouncer", "migrate", "gateway"}
    assert set(services) - default == {"ha-monitor", "ha-node1", "ha-node2", "migrate-ha", "gateway-ha"}
    assert all(services[name]["profiles"] == ["ha"] for name in set(services) - default)  # docs/scaling.md
    fields = set(Settings.model_fields)
    for name in ("migrate", "gateway", "migrate-ha", "gateway-ha"):
        for var in services[name]["environment"]:
            assert var.startswith("TASKGATE_"), var
            assert var.removeprefix("TASKGATE_").lower() in fields, f"{var} is not a setting"
    gateway = services["gateway"]
    env = gateway["environment"]
    assert gateway["ports"] == [f"{env['TASKGATE_PORT']}:{env['TASKGATE_PORT']}"]
    url = make_url(env["TASKGATE_MIGRATION_DATABASE_URL"])  # direct; PgBouncer: test_compose_replicas
    assert url.drivername == "postgresql+asyncpg" and url.host == "postgres"
    pg_env = services["postgres"]["environment"]
    assert (url.username, url.password, url.database) == (
        pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"], pg_env["POSTGRES_DB"])
    assert env["TASKGATE_MIGRATE_ON_START"] == "false"
    assert gateway["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["taskgate", "migrate"]
    assert services["migrate"]["environment"]["TASKGATE_DATABASE_URL"] == env["TASKGATE_MIGRATION_DATABASE_URL"]


def test_dockerfile_is_non_root_and_checks_readiness():
    text = (ROOT / "Dockerfile").read_text()
    assert "USER taskgate" in text
    assert "/readyz" in text and "HEALTHCHECK" in text
    port = _compose()["services"]["gateway"]["environment"]["TASKGATE_PORT"]
    assert f"EXPOSE {port}" in text and f"TASKGATE_PORT={port}" in text
    for path in ("app ./app", "migrations ./migrations", "pyproject.toml"):
        assert f"COPY {path}" in text
