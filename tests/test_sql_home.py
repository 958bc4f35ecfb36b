"""The SQL's one home (:mod:`app.db.sql`): the migrated database holds exactly the
functions of ``app/db/sql/functions/``, every file is loaded as it is now by a
migration, and the named statements parse as documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from app.db import sql


def _words(text: str) -> list[str]:
    return text.split()


async def _functions(conn) -> dict[str, str]:  # type: ignore[no-untyped-def]
    rows = await conn.fetch(
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = current_schema() AND p.proname LIKE 'taskgate\\_%'")
    names = [r["proname"] for r in rows]
    assert len(names) == len(set(names)), "one function per name (no overloads)"
    return {r["proname"]: r["prosrc"] for r in rows}


async def test_every_function_in_the_database_is_its_file(pool):
    async with pool.acquire() as conn:
        stored = await _functions(conn)
    assert sorted(stored) == sorted(sql.function_names())  # every taskgate_* function has a file
    for name in sql.function_names():
        assert _words(stored[name]) == _words(sql.function_body(name)), f"{name}: the database differs from its file"


async def test_the_files_change_nothing_when_run_again(pool):
    """The whole definition (arguments, result, language, volatility) is the file's:
    running the file again (rolled back) leaves ``pg_get_functiondef`` as it was."""
    query = ("SELECT p.proname, pg_get_functiondef(p.oid) AS def FROM pg_proc p"
             " JOIN pg_namespace n ON n.oid = p.pronamespace"
             " WHERE n.nspname = current_schema() AND p.proname LIKE 'taskgate\\_%'")
    async with pool.acquire() as conn:
        before = {r["proname"]: r["def"] for r in await conn.fetch(query)}
        tr = conn.transaction()
        await tr.start()
        try:
            for name in sql.function_names():
                await conn.execute(sql.function_text(name))
            after = {r["proname"]: r["def"] for r in await conn.fetch(query)}
        finally:
            await tr.rollback()
    assert after == before


def test_named_statements_parse_as_documented():
    text = ("-- the area's notes\n\n-- name: one\n-- what it does\nSELECT 1\n  FROM t;\n\n"
            "-- name: two\nSELECT 2 -- inline\n-- kept: inside the statement\n  , 3\n")
    assert sql.parse_statements(text) == {"one": "SELECT 1\n  FROM t",
                                          "two": "SELECT 2 -- inline\n-- kept: inside the statement\n  , 3"}
    for bad in ("SELECT 1\n-- name: a\nSELECT 2", "-- name: a\nSELECT 1\n-- name: a\nSELECT 2", "-- name: a\n-- x\n"):
        with pytest.raises(ValueError):
            sql.parse_statements(bad)
    with pytest.raises(KeyError):
        sql.statement("no such statement")


def _pins() -> dict[str, tuple[str, str]]:
    """function -> (the newest migration pinning it, its pinned digest), in the chain's order."""
    folder = Path(__file__).resolve().parent.parent / "migrations" / "versions"
    modules = {}
    for path in sorted(folder.glob("0*.py")):
        spec = importlib.util.spec_from_file_location("pins_" + path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[module.down_revision] = (path.name, module)
    pins: dict[str, tuple[str, str]] = {}
    revision = None
    while revision in modules:
        name, module = modules[revision]
        for function, digest in getattr(module, "LOADS", {}).items():
            pins[function] = (name, digest)
        revision = module.revision
    return pins


def test_every_file_is_loaded_by_a_migration_as_it_is_now():
    """An edited function file without a migration loading it again would never reach a
    database migrated before the edit."""
    pins = _pins()
    assert sorted(pins) == sorted(sql.function_names())
    for name in sql.function_names():
        migration, digest = pins[name]
        assert digest == sql.function_digest(name), (
            f"{name} changed since {migration} loaded it: add a migration that loads it and pins "
            f"{sql.function_digest(name)} (app/db/sql/__init__.py)")
