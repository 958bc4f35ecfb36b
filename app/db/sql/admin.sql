-- The admin API's statements (app.admin.routes, .budgets, .maintenance, .spend).
-- A PATCH's SET list and the spend export's grouping are filled in at run time from
-- fixed names only (the pieces below with {placeholders}; app.db.sql.assemble: the one
-- place SQL is filled in at run time, and why).

-- Tasks (app.admin.routes) ---------------------------------------------------------

-- name: admin_task_insert
-- Columns in the order of app.admin.routes._INSERT_COLUMNS (tests/test_sql_inventory.py).
INSERT INTO tasks (id, token_hash, request_limit, max_duration_s, token_limit, tool_call_limit, max_stalls,
                   stream_idle_timeout_s, stream_first_event_timeout_s, loop_guard, metadata, cost_limit_usd,
                   allowed_models, conversation_request_limit, conversation_tool_call_limit,
                   conversation_max_duration_s, upstream_timeout_s, cost_wait_s, default_max_output_tokens,
                   budget_id, thresholds)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
RETURNING *;

-- name: admin_task_get
SELECT * FROM tasks WHERE id = $1;

-- name: admin_task_list
-- A page by id after $2: status $1, budget $4 (NULL: any), $3 rows.
SELECT * FROM tasks WHERE ($1::text IS NULL OR status = $1)
   AND ($2::text IS NULL OR id > $2) AND ($4::text IS NULL OR budget_id = $4) ORDER BY id LIMIT $3;

-- name: admin_task_events
SELECT id, kind, reason, detail, created_at FROM task_events WHERE task_id = $1
   AND id > $2 ORDER BY id LIMIT $3;

-- name: admin_task_calls
SELECT call_id, seq, conversation_key, tool_name, arguments_hash, arguments_preview, result_hash,
       is_error, is_empty, raw_result_hash, created_at, completed_at
  FROM tool_calls WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3;

-- name: admin_task_clear
-- Resume: the stop latch cleared.
UPDATE tasks SET status = 'active', stop_reason = NULL, stop_detail = NULL,
       stopped_at = NULL, updated_at = now() WHERE id = $1 RETURNING *;

-- name: admin_task_patch
-- A piece (app.db.sql.assemble.fill): {sets} the changed columns, their values $2 on.
UPDATE tasks SET {sets}, updated_at = now() WHERE id = $1 RETURNING *;

-- name: admin_task_delete
DELETE FROM tasks WHERE id = $1;

-- name: admin_task_reserved
-- The dollars still held for task $1 (app.admin.maintenance).
SELECT reserved_usd FROM tasks WHERE id = $1;

-- Budgets (app.admin.budgets) -------------------------------------------------------

-- name: admin_budget_insert
INSERT INTO budgets (id, parent_id, depth, request_limit, token_limit, cost_limit_usd, "window",
                     timezone, metadata, thresholds, model_limits, requests_per_minute, tokens_per_minute)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING *;

-- name: admin_budget_depth
-- The depth of the parent a new budget nests in (held until the insert commits).
SELECT depth FROM budgets WHERE id = $1 FOR SHARE;

-- name: admin_budget_get
SELECT * FROM budgets WHERE id = $1;

-- name: admin_budget_lock
SELECT * FROM budgets WHERE id = $1 FOR UPDATE;

-- name: admin_budget_list
SELECT * FROM budgets WHERE ($1::text IS NULL OR parent_id = $1) AND ($2::text IS NULL OR id > $2)
 ORDER BY id LIMIT $3;

-- name: admin_budget_current_windows
-- The windows $2 of the budgets $1, with what escrow leases admitted and have not folded
-- into the window yet (lease_spent; app.budgets.escrow.LEASE_SPENT).
SELECT w.*, (SELECT COALESCE(sum(l.spent), 0)::bigint FROM budget_leases l
              WHERE l.budget_id = w.budget_id AND l.window_start = w.window_start) AS lease_spent
  FROM budget_windows w
  JOIN unnest($1::text[], $2::timestamptz[]) AS k(b, s) ON w.budget_id = k.b AND w.window_start = k.s;

-- name: admin_budget_past_windows
-- Budget $1's last 12 windows before $2 (lease_spent as above).
SELECT w.*, (SELECT COALESCE(sum(l.spent), 0)::bigint FROM budget_leases l
              WHERE l.budget_id = w.budget_id AND l.window_start = w.window_start) AS lease_spent
  FROM budget_windows w
 WHERE budget_id = $1 AND window_start < $2 ORDER BY window_start DESC LIMIT 12;

-- name: admin_budget_tasks
SELECT count(*) FROM tasks WHERE budget_id = $1;

-- name: admin_budget_children
SELECT id FROM budgets WHERE parent_id = $1 ORDER BY id LIMIT 1000;

-- name: admin_budget_models
-- Each glob's spend in the windows $2 of the budgets $1.
SELECT m.* FROM budget_model_windows m JOIN unnest($1::text[], $2::timestamptz[]) AS k(b, s)
    ON m.budget_id = k.b AND m.window_start = k.s ORDER BY m.model;

-- name: admin_budget_warnings
-- Thresholds crossed in the windows $2 of the budgets $1.
SELECT x.* FROM budget_warnings x JOIN unnest($1::text[], $2::timestamptz[]) AS k(b, s)
    ON x.budget_id = k.b AND x.window_start = k.s ORDER BY x.crossed_at, x.threshold;

-- name: admin_budget_past_warnings
SELECT * FROM budget_warnings WHERE budget_id = $1 AND window_start < $2 ORDER BY crossed_at, threshold;

-- name: admin_budget_keys
SELECT * FROM budget_keys WHERE budget_id = $1 ORDER BY created_at, id;

-- name: admin_budget_new_key
INSERT INTO budget_keys (id, budget_id, key_hash, template, metadata) VALUES ($1, $2, $3, $4, $5)
RETURNING *;

-- name: admin_budget_events
SELECT * FROM budget_events WHERE budget_id = $1 AND id > $2 ORDER BY id LIMIT $3;

-- name: admin_budget_revoke
UPDATE budget_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1 AND budget_id = $2
RETURNING id;

-- name: admin_budget_patch
-- A piece (app.db.sql.assemble.fill): {sets} the changed columns, their values $2 on.
UPDATE budgets SET {sets}, updated_at = now() WHERE id = $1 RETURNING *;

-- name: admin_budget_delete
DELETE FROM budgets WHERE id = $1;

-- The spend export (app.admin.spend) -----------------------------------------------

-- name: spend_total
-- The fleet's sums over the UTC days $1 to $2 (each request once).
SELECT coalesce(sum(s.requests), 0)::bigint AS requests, coalesce(sum(s.input_tokens), 0)::bigint AS input_tokens,
       coalesce(sum(s.output_tokens), 0)::bigint AS output_tokens,
       coalesce(sum(s.cost_usd), 0)::numeric(30, 10) AS cost_usd
  FROM spend_daily s WHERE s.day BETWEEN $1 AND $2;

-- name: spend_page
-- A piece (app.db.sql.assemble.fill; app.admin.spend.query): a page of the export, the
-- UTC days $1 to $2, $3 rows from offset $4. {with}: spend_chain and a space when grouping
-- by budget; {keys}: "<expression> AS <key>, " per key; {joins}; {group}: GROUP BY and ORDER BY.
{with}SELECT {keys}coalesce(sum(s.requests), 0)::bigint AS requests,
       coalesce(sum(s.input_tokens), 0)::bigint AS input_tokens,
       coalesce(sum(s.output_tokens), 0)::bigint AS output_tokens,
       coalesce(sum(s.cost_usd), 0)::numeric(30, 10) AS cost_usd
  FROM spend_daily s{joins} WHERE s.day BETWEEN $1 AND $2{group} LIMIT $3 OFFSET $4;

-- name: spend_chain
-- A piece: each budget that spent in the days $1 to $2 with itself and its ancestors
-- (rollup): a budget's row holds its nested budgets'. UNION, not UNION ALL: each pair
-- once, so a parent cycle written past the API (a budget made its own parent) ends the
-- walk instead of looping until the statement timeout (and counts nothing twice);
-- budgets without spend in the range are not walked.
WITH RECURSIVE chain(budget_id, rollup) AS (
  SELECT s.budget_id, s.budget_id FROM spend_daily s
   WHERE s.day BETWEEN $1 AND $2 AND s.budget_id IS NOT NULL
  UNION
  SELECT c.budget_id, b.parent_id FROM chain c JOIN budgets b ON b.id = c.rollup
   WHERE b.parent_id IS NOT NULL)
