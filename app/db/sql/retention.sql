-- Retention (app.retention): finished tasks deleted in batches, and the tool-call ledger
-- compacted to what the detector still reads.

-- name: retention_prune
WITH doomed AS (
    SELECT id FROM tasks
     WHERE updated_at < now() - $1 * interval '1 day'
     ORDER BY updated_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED)
DELETE FROM tasks t USING doomed WHERE t.id = doomed.id RETURNING t.id;

-- name: retention_compact_candidates
SELECT id FROM tasks WHERE status = 'active' AND tool_calls > $1 AND id > $2 ORDER BY id LIMIT $3;

-- name: retention_lock_for_compaction
SELECT * FROM tasks WHERE id = $1 AND status = 'active' FOR NO KEY UPDATE SKIP LOCKED;

-- name: retention_compact
WITH ranked AS (
    SELECT call_id, result_hash, completed_at,
           row_number() OVER (PARTITION BY conversation_key ORDER BY seq DESC) AS newest
      FROM tool_calls WHERE task_id = $1),
doomed AS (
    SELECT call_id FROM ranked
     WHERE newest > $2 AND result_hash IS NOT NULL
       AND completed_at < now() - $3 * interval '1 second'
     LIMIT $4)
DELETE FROM tool_calls t USING doomed WHERE t.task_id = $1 AND t.call_id = doomed.call_id;
