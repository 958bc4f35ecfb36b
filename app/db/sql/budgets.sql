-- The budgets room's statements (app.budgets) beside the escrow leases (budget_leases.sql):
-- the locked dollar path and settlement, pause, rates, per-model limits, warning
-- thresholds, a budget key's run tasks.
--
-- Shared parts are written out in each statement that runs them, so each reads whole:
-- - relaxed_commit: the statement commits without waiting for the disk when there are no
--   synchronous standbys (app.db.pool.RELAXED_COMMIT);
-- - the settlement of a budget window (budget_settle_*) adds the columns the guard's
--   ledger_*_in_window statements add in their settled CTE (ledger.sql: the one-window
--   chain without a hold, settled in the statement that records the response);
-- - lease spent: what the open leases of window w spent, part of what it admitted, not
--   folded into w.admitted_requests yet (app.budgets.escrow.LEASE_SPENT).
-- tests/test_sql_budgets.py checks every copy.

-- name: budget_reserve
-- The locked path: the request ($3 its worst-case dollars) counted in every window of
-- the chain ($1 budget ids, $2 window starts), after the chain's verdict admitted it.
UPDATE budget_windows w SET admitted_requests = w.admitted_requests + 1, reserved_usd = w.reserved_usd + $3
  FROM unnest($1::text[], $2::timestamptz[]) AS k(budget_id, window_start)
 WHERE w.budget_id = k.budget_id AND w.window_start = k.window_start;

-- name: budget_take_hold
-- The request's reservations row ($1) gives up its budget windows: only the first of
-- settlement and the sweeper gets them (the row's lock orders the two; NULL: taken).
UPDATE reservations SET budget_ids = NULL, budget_window_starts = NULL
 WHERE id = $1 AND budget_ids IS NOT NULL RETURNING id;

-- name: budget_settle_hold
-- Settle one window ($1, $2; one at a time: settlement never holds two window locks, so
-- it can never close a circle with an admission, which locks the chain root first): $3
-- input and $4 output tokens, $5 dollars settled, $6 released from the window's hold.
-- Durable: a released hold must never be lost while its reservations row says it was.
-- Returns the window's budget and its dollars now.
UPDATE budget_windows SET input_tokens = input_tokens + $3, output_tokens = output_tokens + $4,
       cost_usd = cost_usd + $5, reserved_usd = GREATEST(reserved_usd - $6, 0)
 WHERE budget_id = $1 AND window_start = $2 RETURNING budget_id, cost_usd;

-- name: budget_settle_usage
-- budget_settle_hold when no hold is released (a chain without a dollar ceiling, the
-- escrow lease path): committed relaxed like the task's own usage, so a window row every
-- response of a fleet updates is not held for a disk flush per response.
UPDATE budget_windows SET input_tokens = input_tokens + $3, output_tokens = output_tokens + $4,
       cost_usd = cost_usd + $5, reserved_usd = GREATEST(reserved_usd - $6, 0)
  FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                          THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit
 WHERE budget_id = $1 AND window_start = $2 RETURNING budget_id, cost_usd;

-- name: budget_mark_exhausted
-- Window ($1, $2) ran out: a row only the first time.
UPDATE budget_windows SET exhausted_at = now() WHERE budget_id = $1 AND window_start = $2
   AND exhausted_at IS NULL RETURNING budget_id;

-- name: budget_pause
-- Pause budget $1 (by $2, why $3) unless it is paused. Returns its row after.
UPDATE budgets SET paused_at = now(), paused_by = $2, paused_reason = $3, updated_at = now()
 WHERE id = $1 AND paused_at IS NULL RETURNING *;

-- name: budget_resume
UPDATE budgets SET paused_at = NULL, paused_by = NULL, paused_reason = NULL, updated_at = now()
 WHERE id = $1 AND paused_at IS NOT NULL RETURNING *;

-- name: budget_pause_notify
-- Announce a pause of budget $1 on channel taskgate_budget_pause
-- (app.budgets.pause.PAUSE_CHANNEL), delivered on commit.
SELECT pg_notify('taskgate_budget_pause', $1);

-- name: budget_lock
SELECT * FROM budgets WHERE id = $1 FOR UPDATE;

-- name: budget_event
-- Append one event to budget $1's history: kind $2, reason $3, detail $4. Returns its id.
INSERT INTO budget_events (budget_id, kind, reason, detail) VALUES ($1, $2, $3, $4) RETURNING id;

-- name: budget_paused_tasks
-- For each task of $1 (ids) under a paused budget: that budget (the root-most paused one
-- of its chain), its paused_at, paused_by, paused_reason, and the task's own budget.
-- The chain climbs only to a shallower parent, as budget_chain's (a cycle ends it).
WITH RECURSIVE up AS (
    SELECT t.id AS task_id, t.budget_id AS own, b.id, b.parent_id, b.depth, b.paused_at, b.paused_by,
           b.paused_reason
      FROM tasks t JOIN budgets b ON b.id = t.budget_id WHERE t.id = ANY($1::text[])
    UNION ALL
    SELECT up.task_id, up.own, b.id, b.parent_id, b.depth, b.paused_at, b.paused_by, b.paused_reason
      FROM budgets b JOIN up ON b.id = up.parent_id AND b.depth < up.depth)
SELECT DISTINCT ON (task_id) task_id, own, id, paused_at, paused_by, paused_reason
  FROM up WHERE paused_at IS NOT NULL ORDER BY task_id, depth;

-- name: budget_rate_take
-- Count one request in budget $1's minute starting $2 while it is under $3 requests and
-- $4 tokens per minute (NULL: no such rate). No row: over a rate; fresh: the minute's
-- first request.
INSERT INTO budget_rates AS r (budget_id, minute_start, requests) VALUES ($1, $2, 1)
ON CONFLICT (budget_id, minute_start) DO UPDATE SET requests = r.requests + 1
 WHERE ($3::bigint IS NULL OR r.requests < $3) AND ($4::bigint IS NULL OR r.tokens < $4)
RETURNING r.requests, (r.xmax = 0) AS fresh;

-- name: budget_rate_read
SELECT requests, tokens FROM budget_rates WHERE budget_id = $1 AND minute_start = $2;

-- name: budget_rate_prune
-- Budget $1's minutes before $2.
DELETE FROM budget_rates WHERE budget_id = $1 AND minute_start < $2;

-- name: budget_rate_settle
-- Add $3 tokens to the minute starting $2 of each budget of $1.
INSERT INTO budget_rates AS r (budget_id, minute_start, tokens)
SELECT b, $2, $3 FROM unnest($1::text[]) AS b
ON CONFLICT (budget_id, minute_start) DO UPDATE SET tokens = r.tokens + EXCLUDED.tokens;

-- name: budget_rate_current
-- The minute starting $2 of each budget of $1 that has one (the admin API).
SELECT * FROM budget_rates WHERE budget_id = ANY($1::text[]) AND minute_start = $2;

-- name: budget_model_lock
-- Create (if missing) and lock glob $3's row of window ($1, $2); the glob's holds whose
-- reservation is gone are pruned. Returns the row and held_usd, the dollars in flight.
WITH row AS (
    INSERT INTO budget_model_windows AS m (budget_id, window_start, model) VALUES ($1, $2, $3)
    ON CONFLICT (budget_id, window_start, model) DO UPDATE SET model = EXCLUDED.model RETURNING m.*),
pruned AS (
    DELETE FROM budget_model_holds h WHERE h.budget_id = $1 AND h.window_start = $2 AND h.model = $3
       AND NOT EXISTS (SELECT 1 FROM reservations r WHERE r.id = h.reservation_id))
SELECT row.*, (SELECT coalesce(sum(h.usd), 0) FROM budget_model_holds h
                 JOIN reservations r ON r.id = h.reservation_id
                WHERE h.budget_id = $1 AND h.window_start = $2 AND h.model = $3) AS held_usd
  FROM row;

-- name: budget_model_count
-- One admitted request in each glob row ($1 budget ids, $2 window starts, $3 globs).
UPDATE budget_model_windows m SET admitted_requests = m.admitted_requests + 1
  FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS k(b, s, g)
 WHERE m.budget_id = k.b AND m.window_start = k.s AND m.model = k.g;

-- name: budget_model_hold
-- Hold $4 dollars in each glob row ($2 budget ids, $3 window starts, $5 globs) for as
-- long as reservations row $1 exists.
INSERT INTO budget_model_holds (reservation_id, budget_id, window_start, model, usd)
SELECT $1, b, s, g, $4 FROM unnest($2::text[], $3::timestamptz[], $5::text[]) AS k(b, s, g)
ON CONFLICT DO NOTHING;

-- name: budget_model_settle
-- Add $4 input and $5 output tokens and $6 dollars to each glob row ($1, $2, $3).
UPDATE budget_model_windows m SET input_tokens = m.input_tokens + $4, output_tokens = m.output_tokens + $5,
       cost_usd = m.cost_usd + $6
  FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS k(b, s, g)
 WHERE m.budget_id = k.b AND m.window_start = k.s AND m.model = k.g;

-- name: budget_thresholds_current
-- The current window ($1: the gateway's window clock) of every budget with a limit and
-- thresholds: what it used (admitted counts what open leases spent), what is held, and
-- the thresholds already announced in it ("<limit>:<threshold>").
SELECT b.id, b.request_limit, b.token_limit, b.cost_limit_usd, b.thresholds, w.window_start, w.window_end,
       w.admitted_requests + s.spent AS admitted, w.leased_requests - s.spent AS leased,
       w.input_tokens + w.output_tokens AS tokens, w.cost_usd, w.reserved_usd,
       (SELECT coalesce(array_agg(x.limit_name || ':' || x.threshold), '{}') FROM budget_warnings x
         WHERE x.budget_id = w.budget_id AND x.window_start = w.window_start) AS announced
  FROM budgets b JOIN budget_windows w ON w.budget_id = b.id,
       LATERAL (SELECT (SELECT COALESCE(sum(l.spent), 0)::bigint FROM budget_leases l
                         WHERE l.budget_id = w.budget_id AND l.window_start = w.window_start) AS spent) s
 WHERE (b.request_limit IS NOT NULL OR b.token_limit IS NOT NULL OR b.cost_limit_usd IS NOT NULL)
   AND coalesce(cardinality(b.thresholds), 1) > 0
   AND w.window_start <= $1 AND (w.window_end IS NULL OR $1 < w.window_end);

-- name: budget_warn
-- Record that budget $1's window $2 crossed threshold $4 of limit $3: a row only the first
-- time (across processes).
INSERT INTO budget_warnings (budget_id, window_start, limit_name, threshold) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING crossed_at;

-- name: budget_key_by_hash
SELECT id, budget_id, template FROM budget_keys WHERE key_hash = $1 AND revoked_at IS NULL;

-- name: budget_run_existing
-- Nothing inserted: the run's task $1 (preferred), else the newest of its earlier tasks
-- ($2, newest first) that is budget $3's key $4's.
SELECT id FROM tasks WHERE id = $1
    OR (id = ANY($2::text[]) AND budget_id = $3 AND metadata->>'budget_key' = $4)
 ORDER BY id = $1 DESC, array_position($2::text[], id) LIMIT 1;

-- name: budget_run_task_insert
-- A piece (app.db.sql.assemble.fill): a budget key's run task, unless one of the run's
-- earlier tasks ($1 their ids, newest first) exists and is budget $2's key $3's. {columns}
-- the task's columns: the key template's fields that are task columns (fixed names) and
-- the ones the key sets; {values} their values, $4 on. A column the template leaves out
-- takes its database default, which one fixed statement could not say without repeating
-- every default. Returns the id when inserted.
INSERT INTO tasks ({columns}) SELECT {values}
 WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE id = ANY($1::text[]) AND budget_id = $2
                                         AND metadata->>'budget_key' = $3)
ON CONFLICT (id) DO NOTHING RETURNING id;
