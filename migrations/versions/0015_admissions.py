"""The admission log (issue 37 §3): one row per counted request, keyed by a key the
gateway chooses before it sends the statement, so a ``COMMIT`` whose answer never
arrived (the primary died, a failover) can be reconciled instead of retried blindly.

- ``admissions.key``: a time-ordered UUID chosen per admission attempt
  (``app.db.commits.new_key``); written in the statement (or transaction) that counts
  the request, with the task, the request id and the budget windows it was counted in.
- A key whose outcome is unknown is *fenced* (``app.db.commits.FENCE``): an
  ``INSERT ... ON CONFLICT DO UPDATE`` that either finds the row (the admission landed)
  or inserts a *void* row (``task_id`` NULL) that makes the original, should it still be
  running anywhere, fail on the primary key. Either way it writes, so its commit waits
  for the synchronous standby: the answer holds after a failover. ``reconciled_at``:
  when.
- ``settled_at``: when the request's settlement (usage, dollars, hold and budget windows)
  committed: a settlement retried after a commit whose answer was lost writes nothing
  again (``app.db.commits.settling``).
- ``reservations.admission_key``: the admission that took the hold (to rebuild a
  reconciled admission's reservation).

Rows are kept ``TASKGATE_ADMISSION_LOG_RETENTION_S`` (default 1 h) and then deleted by
the reservation sweep's job; ``admitted_at`` has a BRIN index (cheap on an append-only
table).

``taskgate_record_response()`` (0011) turned ``synchronous_commit`` off for the
response's accounting unconditionally; with a synchronous standby that commit returns
before the standby has it, so a failover could lose a response's usage, settlement and
hold release (a hold stranded, dollars uncounted). It now keeps the session's level when
``synchronous_standby_names`` is set (as ``app.db.pool.RELAXED_COMMIT`` does for the
other relaxed statements); the rest of the function is 0011's, unchanged.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, UUID

_RECORD_RESPONSE = """
CREATE OR REPLACE FUNCTION taskgate_record_response(
    p_task_id text, p_key text, p_window integer,
    p_add_usage boolean,  -- false: the counters are left alone and the hold row stays
    p_input_tokens bigint, p_output_tokens bigint, p_cost_usd numeric, p_release_usd numeric,
    p_reservation_id bigint,
    p_call_ids text[], p_tool_names text[], p_arguments_hashes text[], p_previews text[])
RETURNS TABLE (task tasks, new_calls integer, conversation_calls bigint, window_ids text[],
               window_names text[], window_arguments text[], window_results text[],
               window_errors boolean[], window_empty boolean[])
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    t tasks;
    v_new integer := 0;
    v_conv bigint := 0;
    v_release numeric := 0;
BEGIN
    PERFORM set_config('synchronous_commit', {level}, true);  -- until the transaction ends
    SELECT * INTO t FROM tasks WHERE id = p_task_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_add_usage THEN
        v_release := p_release_usd;
        IF p_reservation_id IS NOT NULL THEN  -- a sweep or an admin may have released it
            DELETE FROM reservations WHERE id = p_reservation_id;
            IF NOT FOUND THEN
                v_release := 0;
            END IF;
        END IF;
    END IF;
    IF cardinality(p_call_ids) > 0 THEN
        WITH added AS (
            INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash,
                                    arguments_preview)
            SELECT t.id, c.call_id, p_key, c.tool_name, c.arguments_hash, c.arguments_preview
              FROM unnest(p_call_ids, p_tool_names, p_arguments_hashes, p_previews) WITH ORDINALITY
                   AS c(call_id, tool_name, arguments_hash, arguments_preview, n)
             ORDER BY c.n
            ON CONFLICT (task_id, call_id) DO NOTHING RETURNING 1)
        SELECT count(*) INTO v_new FROM added;
    END IF;
    IF p_add_usage OR v_new > 0 THEN
        UPDATE tasks SET input_tokens = input_tokens + CASE WHEN p_add_usage THEN p_input_tokens ELSE 0 END,
               output_tokens = output_tokens + CASE WHEN p_add_usage THEN p_output_tokens ELSE 0 END,
               cost_usd = cost_usd + CASE WHEN p_add_usage THEN p_cost_usd ELSE 0 END,
               reserved_usd = reserved_usd - v_release,
               tool_calls = tool_calls + v_new,
               updated_at = now()
         WHERE id = t.id RETURNING * INTO t;
    END IF;
    IF v_new > 0 THEN  -- new calls also break a run of repeated answers
        INSERT INTO conversations (task_id, conversation_key, tool_calls) VALUES (t.id, p_key, v_new)
        ON CONFLICT (task_id, conversation_key) DO UPDATE
           SET tool_calls = conversations.tool_calls + EXCLUDED.tool_calls,
               response_hash = NULL, response_streak = 0, updated_at = now()
        RETURNING tool_calls INTO v_conv;
    END IF;
    RETURN QUERY
        SELECT t, v_new, v_conv,
               array_agg(w.call_id ORDER BY w.seq), array_agg(w.tool_name ORDER BY w.seq),
               array_agg(w.arguments_hash ORDER BY w.seq), array_agg(w.result_hash ORDER BY w.seq),
               array_agg(w.is_error ORDER BY w.seq), array_agg(w.is_empty ORDER BY w.seq)
          FROM (SELECT seq, call_id, tool_name, arguments_hash, result_hash, is_error, is_empty
                  FROM tool_calls WHERE task_id = t.id AND conversation_key = p_key
                 ORDER BY seq DESC LIMIT CASE WHEN v_new > 0 THEN p_window ELSE 0 END) AS w;
END
$fn$
"""
#: ``synchronous_commit`` for the response's accounting: off without synchronous standbys
#: (0011's behaviour), else the session's own.
_LEVEL = ("CASE WHEN current_setting('synchronous_standby_names') = '' THEN 'off'"
          " ELSE current_setting('synchronous_commit') END")

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "admissions",
        sa.Column("key", UUID(as_uuid=True), primary_key=True),
        sa.Column("task_id", sa.Text),
        sa.Column("request_id", sa.Text),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("budget_ids", ARRAY(sa.Text)),
        sa.Column("window_starts", ARRAY(sa.DateTime(timezone=True))),
        sa.Column("reconciled_at", sa.DateTime(timezone=True)),
        sa.Column("settled_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_admissions_admitted_at", "admissions", ["admitted_at"], postgresql_using="brin")
    op.add_column("reservations", sa.Column("admission_key", UUID(as_uuid=True)))
    op.execute(_RECORD_RESPONSE.format(level=_LEVEL))


def downgrade() -> None:
    op.execute(_RECORD_RESPONSE.format(level="'off'"))
    op.drop_column("reservations", "admission_key")
    op.drop_index("ix_admissions_admitted_at", "admissions")
    op.drop_table("admissions")
