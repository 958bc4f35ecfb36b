-- The proxy's own statements (app.proxy, app.mcp.admission): a token's existence, stops
-- seen by polling, a response's counters outside the guard ledger, a tool's dollars.

-- name: proxy_token_exists
SELECT 1 FROM tasks WHERE token_hash = $1;

-- name: proxy_stopped_tasks
-- Of the tasks $1, those stopped for a reason not in $2 (app.proxy.stop_watch.NOT_CUT).
SELECT * FROM tasks WHERE id = ANY($1::text[]) AND status <> 'active'
   AND coalesce(stop_reason, '') <> ALL($2::text[]);

-- name: proxy_count_unmetered
-- A 2xx answer without usage, counted in its own relaxed transaction (app.db.pool.RELAXED_COMMIT).
UPDATE tasks SET unmetered_responses = unmetered_responses + 1, updated_at = now()
  FROM (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                          THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit
 WHERE id = $1;

-- name: proxy_count_stall
UPDATE tasks SET stalls = stalls + 1, updated_at = now() WHERE id = $1 RETURNING stalls, max_stalls;

-- name: mcp_charge
UPDATE tasks SET cost_usd = cost_usd + $2, updated_at = now() WHERE id = $1;
