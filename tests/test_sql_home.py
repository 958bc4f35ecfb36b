"""The SQL's one home (:mod:`app.db.sql`): the migrated database holds exactly the
functions of ``app/db/sql/functions/``; every migration loads its own frozen copy of the
texts it creates (``migrations/functions/<revision>/``, pinned in its ``LOADS``), the
newest copy of every function being its file; the named statements parse as
documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from alembic import command

from app.db import migrate, sql
from migrations import functions
from tests import support


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


def _chain() -> list[ModuleType]:
    """The migrations in the chain's order (each module's ``__name__``: its file's stem)."""
    folder = Path(__file__).resolve().parent.parent / "migrations" / "versions"
    modules = {}
    for path in sorted(folder.glob("0*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[module.down_revision] = module
    chain = []
    revision = None
    while revision in modules:
        chain.append(modules[revision])
        revision = chain[-1].revision
    assert len(chain) == len(modules), "one chain of migrations"
    return chain


def _pins() -> dict[str, tuple[str, str]]:
    """function -> (the revision of the newest migration loading it, its pinned digest)."""
    pins: dict[str, tuple[str, str]] = {}
    for module in _chain():
        for function, digest in getattr(module, "LOADS", {}).items():
            pins[function] = (module.revision, digest)
    return pins


def test_every_copy_a_migration_loads_is_pinned():
    """Each migration's copies match the digests its ``LOADS`` pins (a copy is never
    edited), and its folder holds nothing else."""
    folders = set()
    for module in _chain():
        loads = getattr(module, "LOADS", {})
        if loads:
            folders.add(module.revision)
            assert sorted(p.stem for p in (functions.FOLDER / module.revision).glob("*")) == sorted(loads), (
                f"{module.__name__}: migrations/functions/{module.revision}/ holds exactly its LOADS")
            for name, digest in loads.items():
                assert sql.digest(functions.text(module.revision, name, digest)) == digest
    on_disk = {p.name for p in functions.FOLDER.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert on_disk == folders, "a folder of copies belongs to a migration that loads them"
    with pytest.raises(ValueError, match="never changes"):
        functions.text("0018", "taskgate_abort", "0" * 16)


def test_every_file_is_its_newest_copy():
    """An edited function file without a migration loading a copy of it would never
    reach a database migrated before the edit; a copy that is not the file would leave a
    fresh install different from the file."""
    pins = _pins()
    assert sorted(pins) == sorted(sql.function_names())
    for name in sql.function_names():
        revision, digest = pins[name]
        assert digest == sql.function_digest(name), (
            f"{name} changed since migration {revision} loaded it: add a migration that loads a copy of it"
            f" (migrations/functions/<revision>/{name}.sql) and pins {sql.function_digest(name)}"
            " (app/db/sql/__init__.py)")
        copy = functions.path(revision, name).read_text(encoding="utf-8")
        assert sql.definition(copy) == sql.definition(sql.function_text(name)), name


class _Recorder:
    """Stands in for ``alembic.op`` in a migration module: keeps what it executes."""

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, statement: str) -> None:
        self.executed.append(statement)


def test_a_migration_loads_its_copies_not_the_current_files(monkeypatch):
    """The trap a fresh install falls into otherwise: a migration that loads the current
    file runs a newer text than it was written with (which may use a column or table of
    a later migration). Each migration with ``LOADS`` creates its copies, whatever the
    files say now."""
    for name in sql.function_names():
        monkeypatch.setitem(sql._FUNCTIONS, name, sql.function_text(name).replace("$fn$\n", "$fn$\n-- edited\n", 1))
    for module in _chain():
        loads = getattr(module, "LOADS", {})
        if loads:
            recorder = _Recorder()
            monkeypatch.setattr(module, "op", recorder)
            module.upgrade()
            created = [text for text in recorder.executed if "CREATE" in text]
            assert created == functions.texts(module.revision, loads), module.__name__


def _definitions(url: str) -> dict[str, str]:
    rows = support.sql(url, "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                      " WHERE n.nspname = current_schema() AND p.proname LIKE 'taskgate\\_%'")
    return {r["proname"]: " ".join(r["prosrc"].split()) for r in rows}


def test_the_functions_go_down_and_up_with_their_migrations():
    """Downgrades leave each function as the migration before left it: after 0022, the
    agent turn of 0018's copy; before 0018, no admission rule functions. Up again: the
    files."""
    def body(text: str) -> str:
        return " ".join(text.split("$fn$")[1].split())

    chain = {module.revision: module for module in _chain()}
    with support.fresh_database() as url:
        config = migrate.alembic_config(url)
        command.downgrade(config, "0021")
        turn = functions.text("0018", "taskgate_agent_turn", chain["0018"].LOADS["taskgate_agent_turn"])
        assert _definitions(url)["taskgate_agent_turn"] == body(turn)
        command.downgrade(config, "0017")
        assert "taskgate_admissible" not in _definitions(url)
        command.upgrade(config, "head")
        assert _definitions(url) == {name: body(sql.function_text(name)) for name in sql.function_names()}


#: The history window's columns as the functions return them (app.ledger.rows.window_records).
WINDOW_COLUMNS = " f.window_ids, f.window_names, f.window_arguments, f.window_results, f.window_errors, f.window_empty"


def _same(text: str) -> str:
    """SQL compared as tokens: whitespace runs, and whitespace inside parentheses, ignored."""
    return " ".join(text.split()).replace("( ", "(").replace(" )", ")")


def _ledger_compositions() -> dict[str, str]:
    """The guard ledger's statements as ``app.guard.ledger`` (now :mod:`app.ledger.tool_calls`
    and :mod:`app.settlement.response`) built them from fragments
    before they were written out in ``app/db/sql/ledger.sql``: the relaxed commit from its
    module (a change there without the file turns this red), the spend CTE and the answer
    upsert as they were built then (every statement that runs one holds the same text)."""
    from app.db.pool import RELAXED_COMMIT

    spent_cte = (
        "spent AS (INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens,"
        " output_tokens, cost_usd) SELECT (now() AT TIME ZONE 'UTC')::date, {task_id}, ${model}::text, {budget_id}, 1,"
        " ${input}, ${output}, ${cost} FROM {task} WHERE ${model}::text IS NOT NULL"
        " ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,"
        " input_tokens = s.input_tokens + EXCLUDED.input_tokens,"
        " output_tokens = s.output_tokens + EXCLUDED.output_tokens,"
        " cost_usd = s.cost_usd + EXCLUDED.cost_usd)")

    def spent(task: str, *, model: int, input: int, output: int, cost: int, row: str | None = None) -> str:
        prefix = f"{row}." if row else f"{task}."
        return spent_cte.format(task=task, task_id=prefix + "id", budget_id=prefix + "budget_id", model=model,
                                input=input, output=output, cost=cost)

    answer_of_task = (
        "INSERT INTO conversations (task_id, conversation_key, response_hash, response_streak)"
        " SELECT {task}.id, {key}, {text}, CASE WHEN {repeat}::boolean THEN 1 ELSE 0 END FROM {task}"
        " ON CONFLICT (task_id, conversation_key) DO UPDATE"
        " SET response_streak = CASE WHEN EXCLUDED.response_streak = 0 THEN 0"
        "                            WHEN conversations.response_hash = EXCLUDED.response_hash"
        "                            THEN conversations.response_streak + 1 ELSE 1 END,"
        "     response_hash = EXCLUDED.response_hash, updated_at = now()"
        " RETURNING response_streak")

    # the once-mark: app.db.commits.SETTLE_ONCE with the statement's key, every write gated on it
    once = sql.statement("commit_settle_once").rstrip().rstrip(";").replace("$1", "${key}::uuid")
    marked = "WITH marked AS (" + once + " AS first), "
    gate = "(SELECT first FROM marked) IS NOT FALSE"
    first = "(SELECT first FROM marked) AS first_settlement"
    one = " FROM (VALUES (1)) AS one (n) LEFT JOIN {} ON true"
    held = f"held AS (DELETE FROM reservations WHERE id = $6 AND {gate} RETURNING id)"
    usage = ("UPDATE tasks SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,"
             " cost_usd = cost_usd + $4, updated_at = now(), reserved_usd = reserved_usd"
             " - CASE WHEN $6::bigint IS NULL OR held.n > 0 THEN $5::numeric ELSE 0 END"
             f" FROM {RELAXED_COMMIT}, (SELECT count(*) AS n FROM held) AS held WHERE tasks.id = $1 AND {gate}")
    task = f"{marked}{held}, task AS ({usage} RETURNING tasks.id, tasks.budget_id{{{{more}}}}), "
    in_window = ("settled AS (UPDATE budget_windows w SET input_tokens = w.input_tokens + ${input},"
                 " output_tokens = w.output_tokens + ${output}, cost_usd = w.cost_usd + ${cost}"
                 " FROM {after} WHERE w.budget_id = ${window} AND w.window_start = ${start}"
                 " RETURNING w.budget_id, w.cost_usd)")
    settled = (", (SELECT budget_id FROM settled) AS settled_budget_id,"
               " (SELECT cost_usd FROM settled) AS settled_cost_usd")
    answer = (task.replace("{{more}}", ", tasks.status, tasks.loop_guard")
              + spent("task", model=10, input=2, output=3, cost=4)
              + ", answer AS (" + answer_of_task.format(task="task", key="$7", text="$8", repeat="$9") + "){settle}"
              f" SELECT {first}, task.status, task.loop_guard, (SELECT response_streak FROM answer) AS answer_streak"
              "{settled}" + one.format("task"))
    record = (marked + "f AS (SELECT * FROM taskgate_record_response($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
              f" $12, $13) WHERE {gate}), " + spent("f", row="(f.task)", model=14, input=5, output=6, cost=7))
    columns = (f" SELECT {first}, (f.task).*, f.new_calls AS response_new_calls, f.conversation_calls AS"
               " response_conversation_calls," + WINDOW_COLUMNS)
    return {
        "ledger_add_usage": (task.format(key=8).format(more="") + spent("task", model=7, input=2, output=3, cost=4)
                             + f" SELECT {first}, EXISTS (SELECT FROM task) AS task_settled"),
        "ledger_add_usage_in_window": (
            task.format(key=10).format(more="") + spent("task", model=7, input=2, output=3, cost=4) + ", "
            + in_window.format(after="task", input=2, output=3, cost=4, window=8, start=9)
            + f" SELECT {first}" + settled),
        "ledger_add_answer": answer.replace("{key}", "11").format(settle="", settled=""),
        "ledger_add_answer_in_window": answer.replace("{key}", "13").format(
            settle=", " + in_window.format(after="task", input=2, output=3, cost=4, window=11, start=12),
            settled=settled),
        "ledger_record_response": record.format(key=15) + columns + one.format("f"),
        "ledger_record_response_in_window": (
            record.format(key=17) + ", " + in_window.format(after="f", input=5, output=6, cost=7, window=15, start=16)
            + columns + settled + one.format("f")),
    }


def test_the_written_out_statements_hold_their_shared_fragments():
    for name, composed in _ledger_compositions().items():
        assert _same(sql.statement(name)) == _same(composed), name


def test_admissions_statements_hold_their_shared_fragments():
    """``app/db/sql/admission.sql`` against the fragments still built elsewhere: the
    counted request's ``SET`` and the rule the lease paths take (``app.admission.limits``),
    the window columns, the relaxed commit."""
    from app.admission.limits import ADMISSIBLE, COUNT_REQUEST
    from app.db.pool import RELAXED_COMMIT

    composed = {
        "admission_fast": (f"WITH counted AS (UPDATE tasks SET {COUNT_REQUEST} WHERE token_hash = $1 AND {ADMISSIBLE}"
                           " AND budget_id IS NULL RETURNING *),"
                           " logged AS (INSERT INTO admissions (key, task_id, request_id)"
                           " SELECT $2, id, $3 FROM counted)"
                           " SELECT * FROM counted"),
        "admission_count": (f"WITH counted AS (UPDATE tasks SET {COUNT_REQUEST}, reserved_usd = reserved_usd + $2"
                            " WHERE id = $1 RETURNING *),"
                            " logged AS (INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)"
                            " SELECT $3, id, $4, $5::text[], $6::timestamptz[] FROM counted)"
                            " SELECT * FROM counted"),
        "admission_count_dollars": (f"WITH counted AS (UPDATE tasks SET {COUNT_REQUEST},"
                                    " reserved_usd = reserved_usd + $2"
                                    " WHERE id = $1 AND taskgate_admissible(tasks, $2) RETURNING *),"
                                    " logged AS (INSERT INTO admissions (key, task_id, request_id, budget_ids,"
                                    " window_starts) SELECT $3, id, $4, $5::text[], $6::timestamptz[] FROM counted)"
                                    " SELECT * FROM counted"),
        "admission_turn": ("WITH f AS (SELECT * FROM taskgate_agent_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,"
                           " $12, $13, $14, $15)), logged AS (INSERT INTO admissions (key, task_id, request_id)"
                           " SELECT $16, (f.task).id, $17 FROM f WHERE f.counted)"
                           " SELECT (f.task).*, f.recorded AS turn_recorded, f.counted AS turn_counted,"
                           " f.new_calls AS turn_new_calls, f.completed AS turn_completed,"
                           " f.conversation_calls AS turn_conversation_calls," + WINDOW_COLUMNS
                           + ", f.rule_now FROM f"),
        "admission_known_turn": ("WITH f AS (SELECT * FROM taskgate_known_turn($1, $2, $3, $4, $5, $6, $7, $8,"
                                 " $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)),"
                                 " logged AS (INSERT INTO admissions (key, task_id, request_id)"
                                 " SELECT $19, (f.task).id, $20 FROM f WHERE f.known)"
                                 " SELECT (f.task).*, f.known," + WINDOW_COLUMNS + " FROM f"),
        "anchor_set": ("INSERT INTO conversations (task_id, conversation_key, anchor_input_tokens, anchor_items,"
                       " anchor_hash, anchor_model) SELECT $1::text, $2::text, $3::bigint, $4::int, $5::text, $6::text"
                       f" FROM {RELAXED_COMMIT} ON CONFLICT (task_id, conversation_key) DO UPDATE SET"
                       " anchor_input_tokens = EXCLUDED.anchor_input_tokens, anchor_items = EXCLUDED.anchor_items,"
                       " anchor_hash = EXCLUDED.anchor_hash, anchor_model = EXCLUDED.anchor_model, updated_at = now()"),
    }
    for name, text in composed.items():
        assert _same(sql.statement(name)) == _same(text), name
    assert "taskgate_admissible" not in sql.statement("admission_fast")  # sent as the function's text (sql.inline)
