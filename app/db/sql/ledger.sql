-- The guard ledger's statements (app.ledger.tool_calls, app.settlement.response): the tool-call
-- ledger, a response's usage and settlement, a text answer's run of repeated answers.
--
-- Shared parts are written out in each statement that runs them, so each reads whole:
-- - marked: the settlement's once-mark (app.db.commits.settling's commit_settle_once, in
--   the statement): admission key $N's settled_at set the first time; when an earlier
--   settlement of that admission had committed (a retry after a lost answer), the rest
--   writes nothing (each write gated on it; first_settlement false); a NULL key or one
--   not in the log writes unmarked (first_settlement NULL). It runs first, so the row
--   locks come in settling's order (the admission, then the task);
-- - held/task: the request's hold row ($6, app.admission.reservations) is deleted in the
--   same statement and its amount released only if the row was still there (a sweep or an
--   admin may have released it); the UPDATE commits relaxed (app.db.pool.RELAXED_COMMIT:
--   synchronous_commit off without synchronous standbys, else the session's own);
-- - spent: the request's tokens and dollars into its task's spend_daily row of the day
--   (app.db.spend; model NULL: not an admitted request, nothing written);
-- - answer: a text answer's run of identical answers (app.guard.conversation_rules.answer_repeats);
-- - settled: the usage into the one budget window the request was admitted in, when no
--   hold is released (the escrow lease path), after the task's row (the order admission
--   locks in); the columns are those budget_settle_usage (budgets.sql) adds, its twin
--   for every other chain (tests/test_sql_budgets.py keeps them the same);
-- - the history window as taskgate_record_response returns it (app.ledger.rows).
-- tests/test_sql_home.py checks every copy against one composition of the shared parts.

-- name: ledger_insert_calls
-- A request's or response's tool calls as pending rows, one statement per batch (arrays
-- unnested server-side); a call id seen before is left alone. Returns the new call ids.
INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash, arguments_preview)
SELECT $1, c.call_id, $2, c.tool_name, c.arguments_hash, c.arguments_preview
  FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY
       AS c(call_id, tool_name, arguments_hash, arguments_preview, n)
 ORDER BY c.n
ON CONFLICT (task_id, call_id) DO NOTHING RETURNING call_id;

-- name: ledger_complete_calls
-- Results completing pending calls (written once). Returns the completed call ids.
UPDATE tool_calls t SET result_hash = r.result_hash, is_error = r.is_error, is_empty = r.is_empty,
       raw_result_hash = r.raw_result_hash, completed_at = now()
  FROM unnest($2::text[], $3::text[], $4::bool[], $5::bool[], $6::text[])
       AS r(call_id, result_hash, is_error, is_empty, raw_result_hash)
 WHERE t.task_id = $1 AND t.call_id = r.call_id AND t.result_hash IS NULL RETURNING t.call_id;

-- name: ledger_history
-- The conversation's last $3 ledger rows, newest first.
SELECT call_id, tool_name, arguments_hash, result_hash, is_error, is_empty FROM tool_calls
 WHERE task_id = $1 AND conversation_key = $2 ORDER BY seq DESC LIMIT $3;

-- name: ledger_count_calls
UPDATE tasks SET tool_calls = tool_calls + $2, updated_at = now() WHERE id = $1 RETURNING tool_calls;

-- name: ledger_add_usage
-- A response's usage ($2 input, $3 output tokens, $4 dollars settled, $5 released from the
-- hold $6) and its spend (model $7), once per admission $8 (NULL: unmarked), its own relaxed
-- transaction. Returns first_settlement (see marked) and task_settled (its task was updated).
WITH marked AS (UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $8::uuid
    RETURNING settled_at = now() AS first),
held AS (DELETE FROM reservations WHERE id = $6 AND (SELECT first FROM marked) IS NOT FALSE RETURNING id),
task AS (
    UPDATE tasks SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
           cost_usd = cost_usd + $4, updated_at = now(),
           reserved_usd = reserved_usd - CASE WHEN $6::bigint IS NULL OR held.n > 0 THEN $5::numeric ELSE 0 END
      FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                              THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit,
           (SELECT count(*) AS n FROM held) AS held
     WHERE tasks.id = $1 AND (SELECT first FROM marked) IS NOT FALSE
    RETURNING tasks.id, tasks.budget_id),
spent AS (
    INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, task.id, $7::text, task.budget_id, 1, $2, $3, $4
      FROM task WHERE $7::text IS NOT NULL
    ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,
       input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
       cost_usd = s.cost_usd + EXCLUDED.cost_usd)
SELECT (SELECT first FROM marked) AS first_settlement, EXISTS (SELECT FROM task) AS task_settled;

-- name: ledger_add_usage_in_window
-- ledger_add_usage, and the usage into budget $8's window starting $9, once per admission
-- $10. Returns first_settlement and the window's budget and its dollars now (NULL: no such
-- window).
WITH marked AS (UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $10::uuid
    RETURNING settled_at = now() AS first),
held AS (DELETE FROM reservations WHERE id = $6 AND (SELECT first FROM marked) IS NOT FALSE RETURNING id),
task AS (
    UPDATE tasks SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
           cost_usd = cost_usd + $4, updated_at = now(),
           reserved_usd = reserved_usd - CASE WHEN $6::bigint IS NULL OR held.n > 0 THEN $5::numeric ELSE 0 END
      FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                              THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit,
           (SELECT count(*) AS n FROM held) AS held
     WHERE tasks.id = $1 AND (SELECT first FROM marked) IS NOT FALSE
    RETURNING tasks.id, tasks.budget_id),
spent AS (
    INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, task.id, $7::text, task.budget_id, 1, $2, $3, $4
      FROM task WHERE $7::text IS NOT NULL
    ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,
       input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
       cost_usd = s.cost_usd + EXCLUDED.cost_usd),
settled AS (
    UPDATE budget_windows w SET input_tokens = w.input_tokens + $2, output_tokens = w.output_tokens + $3,
           cost_usd = w.cost_usd + $4
      FROM task WHERE w.budget_id = $8 AND w.window_start = $9 RETURNING w.budget_id, w.cost_usd)
SELECT (SELECT first FROM marked) AS first_settlement, (SELECT budget_id FROM settled) AS settled_budget_id,
       (SELECT cost_usd FROM settled) AS settled_cost_usd;

-- name: ledger_add_answer
-- A text answer in one statement (its own transaction, relaxed): the usage as
-- ledger_add_usage, whose UPDATE locks the task row before the answer's conversation row
-- ($7; $8 its hash, $9 a repeat) is written, the order admission takes (the other order
-- deadlocked with an admission upserting the same conversation: its foreign-key check
-- waits for the task row); spend model $10; once per admission $11. Returns one row:
-- first_settlement, what the repeated_response rule reads of the task (its status and
-- loop_guard; not the whole row, whose decoding cost more than the rest; NULL: no such task
-- or nothing written) and the run of repeated answers.
WITH marked AS (UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $11::uuid
    RETURNING settled_at = now() AS first),
held AS (DELETE FROM reservations WHERE id = $6 AND (SELECT first FROM marked) IS NOT FALSE RETURNING id),
task AS (
    UPDATE tasks SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
           cost_usd = cost_usd + $4, updated_at = now(),
           reserved_usd = reserved_usd - CASE WHEN $6::bigint IS NULL OR held.n > 0 THEN $5::numeric ELSE 0 END
      FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                              THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit,
           (SELECT count(*) AS n FROM held) AS held
     WHERE tasks.id = $1 AND (SELECT first FROM marked) IS NOT FALSE
    RETURNING tasks.id, tasks.budget_id, tasks.status, tasks.loop_guard),
spent AS (
    INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, task.id, $10::text, task.budget_id, 1, $2, $3, $4
      FROM task WHERE $10::text IS NOT NULL
    ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,
       input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
       cost_usd = s.cost_usd + EXCLUDED.cost_usd),
answer AS (
    INSERT INTO conversations (task_id, conversation_key, response_hash, response_streak)
    SELECT task.id, $7, $8, CASE WHEN $9::boolean THEN 1 ELSE 0 END FROM task
    ON CONFLICT (task_id, conversation_key) DO UPDATE
       SET response_streak = CASE WHEN EXCLUDED.response_streak = 0 THEN 0
                                  WHEN conversations.response_hash = EXCLUDED.response_hash
                                  THEN conversations.response_streak + 1 ELSE 1 END,
           response_hash = EXCLUDED.response_hash, updated_at = now()
    RETURNING response_streak)
SELECT (SELECT first FROM marked) AS first_settlement, task.status, task.loop_guard,
       (SELECT response_streak FROM answer) AS answer_streak
  FROM (VALUES (1)) AS one (n) LEFT JOIN task ON true;

-- name: ledger_add_answer_in_window
-- ledger_add_answer, and the usage into budget $11's window starting $12, once per
-- admission $13; returns the window's budget and dollars now too.
WITH marked AS (UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $13::uuid
    RETURNING settled_at = now() AS first),
held AS (DELETE FROM reservations WHERE id = $6 AND (SELECT first FROM marked) IS NOT FALSE RETURNING id),
task AS (
    UPDATE tasks SET input_tokens = input_tokens + $2, output_tokens = output_tokens + $3,
           cost_usd = cost_usd + $4, updated_at = now(),
           reserved_usd = reserved_usd - CASE WHEN $6::bigint IS NULL OR held.n > 0 THEN $5::numeric ELSE 0 END
      FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                              THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit,
           (SELECT count(*) AS n FROM held) AS held
     WHERE tasks.id = $1 AND (SELECT first FROM marked) IS NOT FALSE
    RETURNING tasks.id, tasks.budget_id, tasks.status, tasks.loop_guard),
spent AS (
    INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, task.id, $10::text, task.budget_id, 1, $2, $3, $4
      FROM task WHERE $10::text IS NOT NULL
    ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,
       input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
       cost_usd = s.cost_usd + EXCLUDED.cost_usd),
answer AS (
    INSERT INTO conversations (task_id, conversation_key, response_hash, response_streak)
    SELECT task.id, $7, $8, CASE WHEN $9::boolean THEN 1 ELSE 0 END FROM task
    ON CONFLICT (task_id, conversation_key) DO UPDATE
       SET response_streak = CASE WHEN EXCLUDED.response_streak = 0 THEN 0
                                  WHEN conversations.response_hash = EXCLUDED.response_hash
                                  THEN conversations.response_streak + 1 ELSE 1 END,
           response_hash = EXCLUDED.response_hash, updated_at = now()
    RETURNING response_streak),
settled AS (
    UPDATE budget_windows w SET input_tokens = w.input_tokens + $2, output_tokens = w.output_tokens + $3,
           cost_usd = w.cost_usd + $4
      FROM task WHERE w.budget_id = $11 AND w.window_start = $12 RETURNING w.budget_id, w.cost_usd)
SELECT (SELECT first FROM marked) AS first_settlement, task.status, task.loop_guard,
       (SELECT response_streak FROM answer) AS answer_streak,
       (SELECT budget_id FROM settled) AS settled_budget_id, (SELECT cost_usd FROM settled) AS settled_cost_usd
  FROM (VALUES (1)) AS one (n) LEFT JOIN task ON true;

-- name: ledger_record_response
-- A response's tool calls (taskgate_record_response: relaxed commit, task row lock, usage
-- and settlement, the hold row, pending ledger rows, task and conversation counts) and its
-- spend (model $14), once per admission $15 (the function runs only when marked says so);
-- one row: first_settlement, the locked row after them (NULL: no such task or nothing
-- written) and the conversation's window ($3 records, oldest first).
WITH marked AS (UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $15::uuid
    RETURNING settled_at = now() AS first),
f AS (SELECT * FROM taskgate_record_response($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
      WHERE (SELECT first FROM marked) IS NOT FALSE),
spent AS (
    INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, (f.task).id, $14::text, (f.task).budget_id, 1, $5, $6, $7
      FROM f WHERE $14::text IS NOT NULL
    ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,
       input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
       cost_usd = s.cost_usd + EXCLUDED.cost_usd)
SELECT (SELECT first FROM marked) AS first_settlement, (f.task).*, f.new_calls AS response_new_calls, f.conversation_calls AS response_conversation_calls,
       f.window_ids, f.window_names, f.window_arguments, f.window_results, f.window_errors, f.window_empty
  FROM (VALUES (1)) AS one (n) LEFT JOIN f ON true;

-- name: ledger_record_response_in_window
-- ledger_record_response, and the usage into budget $15's window starting $16 (it reads
-- the function's row, so the function has locked the task first), once per admission $17;
-- returns the window's budget and dollars now too.
WITH marked AS (UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $17::uuid
    RETURNING settled_at = now() AS first),
f AS (SELECT * FROM taskgate_record_response($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
      WHERE (SELECT first FROM marked) IS NOT FALSE),
spent AS (
    INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
    SELECT (now() AT TIME ZONE 'UTC')::date, (f.task).id, $14::text, (f.task).budget_id, 1, $5, $6, $7
      FROM f WHERE $14::text IS NOT NULL
    ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + 1,
       input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
       cost_usd = s.cost_usd + EXCLUDED.cost_usd),
settled AS (
    UPDATE budget_windows w SET input_tokens = w.input_tokens + $5, output_tokens = w.output_tokens + $6,
           cost_usd = w.cost_usd + $7
      FROM f WHERE w.budget_id = $15 AND w.window_start = $16 RETURNING w.budget_id, w.cost_usd)
SELECT (SELECT first FROM marked) AS first_settlement, (f.task).*, f.new_calls AS response_new_calls, f.conversation_calls AS response_conversation_calls,
       f.window_ids, f.window_names, f.window_arguments, f.window_results, f.window_errors, f.window_empty,
       (SELECT budget_id FROM settled) AS settled_budget_id, (SELECT cost_usd FROM settled) AS settled_cost_usd
  FROM (VALUES (1)) AS one (n) LEFT JOIN f ON true;
