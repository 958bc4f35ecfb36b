-- Admission's statements (app.admission): counting a request, the agent-turn paths, the
-- refusal count, the conversation's input-token anchor, the dollar holds.
--
-- A counted request: admitted_requests + 1, its first admission starts max_duration_s
-- (the SET of app.admission.limits.COUNT_REQUEST, which the budget lease paths take), and
-- its admissions row under the key chosen before the statement was sent (app.db.commits).
-- The rule is taskgate_admissible (app/db/sql/functions/), sent as its own text
-- (app.db.sql.inline) where the call has no dollars. tests/test_sql_home.py checks every
-- shared part against the fragment its module still builds.

-- name: admission_fast
-- The fast path: one statement, its own transaction; $2 the admission key, $3 the request id.
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE token_hash = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks) AND budget_id IS NULL
    RETURNING *),
logged AS (INSERT INTO admissions (key, task_id, request_id) SELECT $2, id, $3 FROM counted)
SELECT * FROM counted;

-- name: admission_lock_by_id
-- The locked path's lock (app.admission.admission): task $1's row, FOR UPDATE, with the
-- admission rule on it (admissible: taskgate_admissible without dollars, the request's
-- being known only once the row is read; admission_count_dollars asks the rule with
-- them) and
-- the transaction's clock the rule read (rule_now), which a refusal's numbers quote.
SELECT tasks.*, taskgate_admissible(tasks) AS admissible, now() AS rule_now FROM tasks WHERE id = $1 FOR UPDATE;

-- name: admission_lock_by_token
-- As admission_lock_by_id, the task whose token hashes to $1.
SELECT tasks.*, taskgate_admissible(tasks) AS admissible, now() AS rule_now FROM tasks
 WHERE token_hash = $1 FOR UPDATE;

-- name: admission_count
-- The locked path's count: $2 dollars reserved, $3 the admission key, $4 the request id,
-- $5/$6 the budget windows it is counted in. For a task without a cost_limit_usd, whose
-- rule the lock's verdict is (taskgate_admissible's dollar clause holds for any dollars).
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now(),
           reserved_usd = reserved_usd + $2
     WHERE id = $1
    RETURNING *),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $3, id, $4, $5::text[], $6::timestamptz[] FROM counted)
SELECT * FROM counted;

-- name: admission_count_dollars
-- As admission_count, for a task with a cost_limit_usd: the rule with the request's
-- dollars $2 decides here, in the statement that counts (no row: the rule refuses what
-- the lock's verdict and the dollar ceiling admitted, a bug; the caller rolls back). Not
-- in admission_count: planning the rule's text costs ~110 us per execution without a
-- statement cache (PgBouncer), for a clause that holds without a dollar ceiling.
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now(),
           reserved_usd = reserved_usd + $2
     WHERE id = $1 AND taskgate_admissible(tasks, $2)
    RETURNING *),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $3, id, $4, $5::text[], $6::timestamptz[] FROM counted)
SELECT * FROM counted;

-- name: task_by_id
SELECT * FROM tasks WHERE id = $1;

-- name: task_by_token
SELECT * FROM tasks WHERE token_hash = $1;

-- name: admission_turn
-- The agent-turn path (app.admission.turn): taskgate_agent_turn's 15 parameters, $16 the
-- admission key and $17 the request id (a counted turn's admissions row); rule_now: the
-- clock the rule read, which a refusal's numbers quote.
WITH f AS (SELECT * FROM taskgate_agent_turn($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)),
logged AS (INSERT INTO admissions (key, task_id, request_id) SELECT $16, (f.task).id, $17 FROM f WHERE f.counted)
SELECT (f.task).*, f.recorded AS turn_recorded, f.counted AS turn_counted, f.new_calls AS turn_new_calls,
       f.completed AS turn_completed, f.conversation_calls AS turn_conversation_calls,
       f.window_ids, f.window_names, f.window_arguments, f.window_results, f.window_errors, f.window_empty,
       f.rule_now
  FROM f;

-- name: admission_known_turn
-- A turn on a known window (app.admission.known_turn): taskgate_known_turn's 18
-- parameters, $19 the admission key and $20 the request id (an admitted turn's row).
WITH f AS (SELECT * FROM taskgate_known_turn($1, $2, $3, $4, $5, $6, $7, $8,
                                             $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)),
logged AS (INSERT INTO admissions (key, task_id, request_id) SELECT $19, (f.task).id, $20 FROM f WHERE f.known)
SELECT (f.task).*, f.known,
       f.window_ids, f.window_names, f.window_arguments, f.window_results, f.window_errors, f.window_empty
  FROM f;

-- name: refusal_count
UPDATE tasks SET refused_requests = refused_requests + 1 WHERE id = $1 RETURNING refused_requests;

-- name: anchor_read
SELECT anchor_input_tokens, anchor_items, anchor_hash, anchor_model FROM conversations
 WHERE task_id = $1 AND conversation_key = $2;

-- name: anchor_set
-- Its own relaxed transaction (app.db.pool.RELAXED_COMMIT), like the usage it comes with:
-- a lost anchor only loosens a bound.
INSERT INTO conversations (task_id, conversation_key, anchor_input_tokens, anchor_items, anchor_hash, anchor_model)
SELECT $1::text, $2::text, $3::bigint, $4::int, $5::text, $6::text
  FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                          THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit
ON CONFLICT (task_id, conversation_key) DO UPDATE SET anchor_input_tokens = EXCLUDED.anchor_input_tokens,
   anchor_items = EXCLUDED.anchor_items, anchor_hash = EXCLUDED.anchor_hash,
   anchor_model = EXCLUDED.anchor_model, updated_at = now();

-- name: hold_take
-- A dollar hold (app.admission.reservations): $3 seconds until its deadline, $4-$6 the
-- owning process, $7/$8 its budget windows, $9 the admission that took it.
INSERT INTO reservations (task_id, amount_usd, deadline_at, owner_host, owner_pid, owner_started_at,
                          budget_ids, budget_window_starts, admission_key)
VALUES ($1, $2, now() + $3 * interval '1 second', $4, $5, $6, $7, $8, $9) RETURNING id;

-- name: holds_of_admission
-- The holds of one admission ($1 its key, app.db.commits).
SELECT id FROM reservations WHERE admission_key = $1;

-- name: hold_of_admission_amount
SELECT id, amount_usd FROM reservations WHERE admission_key = $1;

-- name: holds_overdue
-- At most $1 holds past their deadline (or every hold of task $2), oldest deadline first.
SELECT id, owner_host, owner_pid, owner_started_at, deadline_at < now() AS overdue FROM reservations
 WHERE (deadline_at < now() OR $2::text IS NOT NULL) AND ($2::text IS NULL OR task_id = $2)
 ORDER BY deadline_at LIMIT $1;

-- name: holds_lock_tasks
-- Before releasing, the rows it updates are locked in the order every admission locks
-- them (its task row, then its budget windows root first), so a release never waits on an
-- admission that waits on it.
SELECT 1 FROM tasks WHERE id IN (SELECT task_id FROM reservations WHERE id = ANY($1::bigint[]))
 ORDER BY id FOR UPDATE;

-- name: holds_lock_windows
SELECT 1 FROM budget_windows w JOIN budgets b ON b.id = w.budget_id
 WHERE (w.budget_id, w.window_start) IN (
       SELECT k.budget_id, k.window_start FROM reservations r,
              unnest(r.budget_ids, r.budget_window_starts) AS k(budget_id, window_start)
        WHERE r.id = ANY($1::bigint[]))
 ORDER BY b.depth, w.budget_id, w.window_start FOR UPDATE OF w;

-- name: holds_release
-- Release holds $1 (reason $2): their dollars off their budget windows and tasks, one
-- reservation_released event per task. Returns per task the holds and dollars released.
WITH gone AS (
    DELETE FROM reservations WHERE id = ANY($1::bigint[])
    RETURNING id, task_id, amount_usd, deadline_at, owner_host, owner_pid, budget_ids, budget_window_starts),
per_window AS (
    SELECT w.budget_id, w.window_start, sum(g.amount_usd) AS usd
      FROM gone g, unnest(g.budget_ids, g.budget_window_starts) AS w(budget_id, window_start)
     GROUP BY w.budget_id, w.window_start),
budgets_released AS (
    UPDATE budget_windows b SET reserved_usd = greatest(b.reserved_usd - p.usd, 0)
      FROM per_window p WHERE b.budget_id = p.budget_id AND b.window_start = p.window_start RETURNING 1),
per_task AS (
    SELECT task_id, sum(amount_usd) AS usd, count(*) AS n, array_agg(id ORDER BY id) AS ids,
           array_agg(DISTINCT owner_host || ':' || owner_pid) AS owners, max(deadline_at) AS deadline
      FROM gone GROUP BY task_id),
settled AS (
    UPDATE tasks t SET reserved_usd = greatest(t.reserved_usd - p.usd, 0), updated_at = now()
      FROM per_task p WHERE t.id = p.task_id RETURNING t.id)
INSERT INTO task_events (task_id, kind, reason, detail)
SELECT p.task_id, 'reservation_released', $2,
       jsonb_build_object('reservations', p.n, 'released_usd', p.usd::text, 'reservation_ids', p.ids,
                          'owners', p.owners, 'latest_deadline', p.deadline)
  FROM per_task p
RETURNING task_id, (detail->>'reservations')::int AS n, (detail->>'released_usd')::numeric AS usd;
