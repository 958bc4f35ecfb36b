"""The budgets room's SQL (``app/db/sql/budget_leases.sql``, ``budgets.sql``): every
statement ``app.budgets`` sends comes from there, and each part the statements share,
written out in every one, is checked against the fragment its module still owns (the
counted request and the rule, the room columns, the relaxed commit, the leases' spent
requests) or, where no module owns it any more, against one copy here (what a lease
pays with): a copy changed alone turns this red."""

from __future__ import annotations

import ast
from pathlib import Path

from app.db import sql

#: The templates ``app.budgets.escrow`` built its fast statements from (``str.format``)
#: before they were written out whole; the parts no module owns any more are here.
PAYS = ("l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit"
        " AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL"
        " AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL AND (b.token_limit IS NULL OR"
        " (SELECT w.input_tokens + w.output_tokens FROM budget_windows w"
        " WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start) < b.token_limit)")
COUNTED = "counted AS (UPDATE tasks SET {count} WHERE {column} = $1 AND {rule} RETURNING *),"
FAST = (
    "WITH " + COUNTED + "{leases}"
    " paid AS (UPDATE budget_leases l SET spent = l.spent + 1 FROM {source}budgets b, budget_windows w"
    " WHERE l.holder = $2 AND {which} AND w.budget_id = l.budget_id AND w.window_start = l.window_start"
    " AND b.id = l.budget_id AND b.parent_id IS NOT DISTINCT FROM ($5::text[])[array_position($5::text[], b.id) - 1]"
    " AND {pays} RETURNING l.budget_id, l.window_start{room}),"
    " logged AS (INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)"
    " SELECT $6, c.id, $7, $5::text[],"
    " (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) FROM paid) FROM counted c)"
    " SELECT c.*, p.* FROM counted c,"
    " (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) AS lease_window_starts{rooms}"
    " FROM paid) p"
    " WHERE CASE WHEN c.budget_id IS DISTINCT FROM $4 OR coalesce(cardinality(p.lease_window_starts), 0)"
    " < cardinality($5::text[]) THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END")
ONE_LEASE = {"leases": "", "source": "", "which": "l.budget_id = $4 AND EXISTS (SELECT 1 FROM counted)"
             " AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)"}
CHAIN_LEASES = {"leases": " mine AS (SELECT l.budget_id, l.window_start FROM budget_leases l"
                " WHERE l.holder = $2 AND l.budget_id = ANY($5::text[]) AND EXISTS (SELECT 1 FROM counted)"
                " AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)"
                " AND l.expires_at > now() ORDER BY array_position($5::text[], l.budget_id) FOR UPDATE),",
                "source": "mine, ", "which": "l.budget_id = mine.budget_id AND l.window_start = mine.window_start"}
UP_COLUMNS = ("b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,"
              " b.model_limits, b.requests_per_minute, b.tokens_per_minute")
FIRST_SIGHT = (
    "WITH RECURSIVE " + COUNTED
    + f" up AS (SELECT {UP_COLUMNS} FROM budgets b JOIN counted ON b.id = counted.budget_id"
    f" UNION ALL SELECT {UP_COLUMNS} FROM budgets b JOIN up ON b.id = up.parent_id AND b.depth < up.depth),"
    " mine AS (SELECT l.budget_id, l.window_start FROM budget_leases l JOIN up b ON b.id = l.budget_id"
    " WHERE l.holder = $2 AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)"
    " AND l.expires_at > now() ORDER BY b.depth FOR UPDATE OF l),"
    " paid AS (UPDATE budget_leases l SET spent = l.spent + 1 FROM mine, up b, budget_windows w"
    " WHERE l.holder = $2 AND l.budget_id = b.id AND w.budget_id = l.budget_id AND w.window_start = l.window_start"
    " AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start"
    " AND {pays} RETURNING l.budget_id, l.window_start{room}),"
    " logged AS (INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)"
    " SELECT $4, c.id, $5, (SELECT array_agg(id ORDER BY depth) FROM up),"
    " (SELECT array_agg(p.window_start ORDER BY u.depth) FROM paid p JOIN up u ON u.id = p.budget_id)"
    " FROM counted c)"
    " SELECT c.*, (SELECT array_agg(id ORDER BY depth) FROM up) AS lease_chain, r.* FROM counted c,"
    " (SELECT array_agg(window_start ORDER BY room_depth) AS lease_window_starts{rooms} FROM paid) r"
    " WHERE CASE WHEN (SELECT count(*) FROM paid) < (SELECT count(*) FROM up)"
    " THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END")
SPEND = ("WITH mine AS (SELECT l.budget_id, l.window_start FROM budget_leases l JOIN budgets b ON b.id = l.budget_id"
         " WHERE l.holder = $1 AND l.budget_id = ANY($3::text[])"
         " AND l.window_start <= $2 AND (l.window_end IS NULL OR $2 < l.window_end)"
         " AND l.expires_at > now() ORDER BY b.depth FOR UPDATE OF l)"
         " UPDATE budget_leases l SET spent = l.spent + 1 FROM mine, budgets b, budget_windows w"
         " WHERE l.holder = $1 AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start"
         " AND b.id = l.budget_id AND w.budget_id = l.budget_id AND w.window_start = l.window_start AND {pays}"
         " RETURNING l.budget_id{room}")


def _same(text: str) -> str:
    """SQL compared as tokens: whitespace runs, and whitespace inside parentheses, ignored."""
    return " ".join(text.split()).replace("( ", "(").replace(" )", ")")


def test_the_lease_statements_hold_their_shared_fragments():
    from app.admission.limits import ADMISSIBLE, COUNT_REQUEST
    from app.budgets.room import ROOM_ARRAYS, ROOM_RETURNING

    parts = {"count": COUNT_REQUEST, "rule": ADMISSIBLE, "pays": PAYS, "room": ROOM_RETURNING}
    by_position = ROOM_ARRAYS.format(order="array_position($5::text[], budget_id)")
    composed = {
        "lease_spend": SPEND.format(**parts),
        "lease_first_by_token": FIRST_SIGHT.format(column="token_hash", rooms=ROOM_ARRAYS.format(order="room_depth"),
                                                   **parts),
        "lease_first_by_id": FIRST_SIGHT.format(column="id", rooms=ROOM_ARRAYS.format(order="room_depth"), **parts),
    }
    for suffix, column in (("by_token", "token_hash"), ("by_id", "id")):
        composed["lease_fast_" + suffix] = FAST.format(column=column, rooms=by_position, **parts, **CHAIN_LEASES)
        composed["lease_fast_one_" + suffix] = FAST.format(column=column, rooms=by_position, **parts, **ONE_LEASE)
    for name, text in composed.items():
        assert _same(sql.statement(name)) == _same(text), name
    assert "taskgate_admissible" not in sql.statement("lease_fast_by_token")  # sent as its text (sql.inline)


def test_the_budget_statements_hold_their_shared_fragments():
    from app.budgets.escrow import LEASE_SPENT
    from app.budgets.pause import PAUSE_CHANNEL
    from app.db.pool import RELAXED_COMMIT

    hold, usage = sql.statement("budget_settle_hold"), sql.statement("budget_settle_usage")
    where = " WHERE budget_id = $1 AND window_start = $2"
    assert _same(usage) == _same(hold.replace(where, f" FROM {RELAXED_COMMIT}{where}"))
    assert _same(f"(SELECT {LEASE_SPENT} AS spent)") in _same(sql.statement("budget_thresholds_current"))
    assert f"'{PAUSE_CHANNEL}'" in sql.statement("budget_pause_notify")


def _set_columns(update: str) -> list[str]:
    """The columns an ``UPDATE budget_windows ... SET ... FROM|WHERE`` sets, in order."""
    assignments = _same(update).split(" SET ", 1)[1].split(" FROM ")[0].split(" WHERE ")[0]
    return [part.split(" = ")[0].removeprefix("w.") for part in assignments.split(", ") if " = " in part]


def test_the_window_settlement_adds_the_same_columns_in_both_places():
    """``budget_settle_usage`` and the ``settled`` part of the guard's statements that
    settle a one-window chain while recording the response (app/db/sql/ledger.sql)."""
    columns = _set_columns(sql.statement("budget_settle_usage"))
    assert columns == ["input_tokens", "output_tokens", "cost_usd", "reserved_usd"]
    for name in ("ledger_add_usage_in_window", "ledger_add_answer_in_window", "ledger_record_response_in_window"):
        settled = sql.statement(name).split("settled AS (", 1)[1]
        assert _set_columns(settled) == columns[:3], name  # no hold to release there
        assert "RETURNING w.budget_id, w.cost_usd" in settled, name


#: SQL text app/budgets may still hold outside app/db/sql, and why.
FRAGMENTS = {
    ("escrow.py", "LEASE_SPENT"): "an expression the admin API's window statements embed",
    ("room.py", "ROOM_RETURNING"): "documents the room columns; bench.room_cost strips it to price it",
}
_SQL_WORDS = ("SELECT ", "UPDATE ", "INSERT ", "DELETE ")


def test_the_budgets_room_sends_only_named_statements():
    folder = Path(__file__).resolve().parent.parent / "app" / "budgets"
    found = set()
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.AsyncFunctionDef)):
                function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                targets = [] if function else node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [node.name] if function else [t.id for t in targets if isinstance(t, ast.Name)]
                body = node.body[1:] if function else [node]  # not the docstring
                texts = [n.value for b in body for n in ast.walk(b)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                if any(word in text for text in texts for word in _SQL_WORDS):
                    found.update((path.name, name) for name in names)
    assert found == set(FRAGMENTS)
