-- The storage floor's own statements: task rows (app.db.tasks), the admission log
-- (app.db.commits), a transaction's commit level (app.db.pool) and the health probe.

-- name: health_probe
-- Whether the database answers (readiness, start-up, a listener's keepalive).
SELECT 1;

-- name: task_latch
-- Set the stop latch ($2 reason, $3 detail) of task $1 if still active and NOTIFY the
-- channel app.db.tasks.STOP_CHANNEL (taskgate_stop) with its id, on commit.
-- Command tag 'SELECT 0': it was already stopped.
WITH latched AS (UPDATE tasks SET status = 'stopped', stop_reason = $2, stop_detail = $3,
                        stopped_at = now(), updated_at = now()
                  WHERE id = $1 AND status = 'active' RETURNING id)
SELECT pg_notify('taskgate_stop', id) FROM latched;

-- name: task_event
-- Append one event ($2 kind, $3 reason, $4 detail) to task $1's history; returns its id.
INSERT INTO task_events (task_id, kind, reason, detail) VALUES ($1, $2, $3, $4) RETURNING id;

-- name: task_lock_by_id
SELECT * FROM tasks WHERE id = $1 FOR UPDATE;

-- name: task_lock_by_token
SELECT * FROM tasks WHERE token_hash = $1 FOR UPDATE;

-- name: commit_fence
-- Fence one admission key ($1): the admission's row when it landed (task_id set), else a
-- new void row (task_id NULL). Writes either way, durably (synchronous_commit at least on).
WITH durable AS (SELECT set_config('synchronous_commit',
                      CASE WHEN current_setting('synchronous_commit') IN ('remote_apply', 'remote_write', 'on')
                           THEN current_setting('synchronous_commit') ELSE 'on' END, true))
INSERT INTO admissions (key, reconciled_at) SELECT $1, now() FROM durable
ON CONFLICT (key) DO UPDATE SET reconciled_at = now()
RETURNING key, task_id, request_id, budget_ids, window_starts;

-- name: commit_settle_once
-- Mark admission $1 settled: true the first time, false when settled before, no row when
-- the admission is not in the log.
UPDATE admissions SET settled_at = coalesce(settled_at, now()) WHERE key = $1
RETURNING settled_at = now();

-- name: commit_lock_task
-- The task row, locked before a settlement's budget windows (admission's lock order).
SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE;

-- name: commit_prune
-- Admission log rows older than $1 seconds, deleted $2 at a time.
DELETE FROM admissions WHERE key IN (
  SELECT key FROM admissions WHERE admitted_at < now() - $1 * interval '1 second' LIMIT $2
     FOR UPDATE SKIP LOCKED);

-- name: pool_durable
-- The current transaction's commit waits for the disk.
SET LOCAL synchronous_commit = on;

-- name: pool_relaxed
-- The current transaction commits without waiting for the disk: off on a server without
-- synchronous standbys, else the session's own level.
SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = '' THEN 'off'
                                             ELSE current_setting('synchronous_commit') END, true);

-- name: relaxed_commit
-- Not a statement: the FROM item app.db.pool.RELAXED_COMMIT (pool_relaxed inside a
-- statement that is its own transaction). Statements that run it write it out whole.
(SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = '' THEN 'off'
                                              ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit

-- name: backend_pid
-- The PostgreSQL backend this session runs on (a pooler answers with another).
SELECT pg_backend_pid();

-- name: task_exists
SELECT 1 FROM tasks WHERE id = $1;
