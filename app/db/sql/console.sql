-- The console's statements (app.console, app.admin.stats): the stop webhook's event, the
-- request log, the dashboard's series.

-- name: webhook_stop_event
-- The stopped event $1 with its task's row, once committed.
SELECT e.reason AS event_reason, e.detail AS event_detail, e.created_at AS event_at, t.*
  FROM task_events e JOIN tasks t ON t.id = e.task_id WHERE e.id = $1 AND e.kind = 'stopped';

-- name: request_log_insert
-- A batch of finished requests (arrays, one element per request); rows of deleted tasks dropped.
-- Inserted in task id order: each row's foreign key check takes a KEY SHARE lock on its task,
-- so the batch takes its tasks' locks in the order every multi-task statement does (a
-- settlement round locks its tasks FOR UPDATE in id order; in arrival order the two
-- deadlocked under load, tests/test_failover.py).
INSERT INTO request_log (task_id, finished_at, endpoint, model, provider, status, outcome, stream,
                         input_tokens, output_tokens, cost_usd, duration_ms, request_id)
SELECT r.* FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::int[],
                       $7::text[], $8::bool[], $9::bigint[], $10::bigint[], $11::numeric[],
                       $12::float8[], $13::text[])
       AS r(task_id, finished_at, endpoint, model, provider, status, outcome, stream, input_tokens,
            output_tokens, cost_usd, duration_ms, request_id)
  JOIN (SELECT id FROM tasks WHERE id = ANY ($1::text[])) AS t ON t.id = r.task_id
 ORDER BY r.task_id, r.finished_at;

-- name: request_log_purge
-- Rows older than $1 seconds, $2 at a time.
DELETE FROM request_log WHERE id IN (
  SELECT id FROM request_log WHERE finished_at < now() - make_interval(secs => $1) LIMIT $2);

-- name: stats_series
SELECT floor(extract(epoch FROM finished_at - $1) / $3)::int AS bucket, coalesce(model, '') AS model,
       count(*) AS requests, sum(input_tokens + output_tokens) AS tokens, coalesce(sum(cost_usd), 0) AS cost
FROM request_log WHERE finished_at >= $1 AND finished_at < $2 GROUP BY 1, 2;

-- name: stats_stops
SELECT floor(extract(epoch FROM created_at - $1) / $3)::int AS bucket, coalesce(reason, '') AS reason,
       count(*) AS stops
FROM task_events WHERE kind = 'stopped' AND created_at >= $1 AND created_at < $2 GROUP BY 1, 2;

-- name: stats_top
-- Both top lists (by cost, by requests; $3 each) from one pass over the period's rows.
WITH per_task AS (
  SELECT task_id, count(*) AS requests, sum(input_tokens + output_tokens) AS tokens,
         coalesce(sum(cost_usd), 0) AS cost
  FROM request_log WHERE finished_at >= $1 AND finished_at < $2 GROUP BY task_id)
(SELECT 'cost' AS list, * FROM per_task ORDER BY cost DESC, requests DESC, task_id LIMIT $3)
UNION ALL
(SELECT 'requests' AS list, * FROM per_task ORDER BY requests DESC, cost DESC, task_id LIMIT $3);

-- name: stats_first
-- The period's first request or stop (least skips a NULL); both read one index.
SELECT least((SELECT min(finished_at) FROM request_log WHERE finished_at >= $1 AND finished_at < $2),
             (SELECT min(created_at) FROM task_events WHERE kind = 'stopped' AND created_at >= $1 AND created_at < $2));

-- name: stats_stopped
SELECT * FROM tasks WHERE stopped_at >= $1 AND stopped_at < $2 ORDER BY stopped_at DESC LIMIT $3;

-- name: stats_requests
SELECT id, finished_at, endpoint, model, provider, status, outcome, stream, input_tokens,
       output_tokens, cost_usd, duration_ms, request_id FROM request_log
 WHERE task_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3;
