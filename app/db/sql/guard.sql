-- The guard's storage (app.ledger.conversations, app.ledger.strikes): per-conversation
-- counters, strikes and pending notes. Callers hold the task's row lock.

-- name: conversation_get
SELECT requests, tool_calls, first_request_at, response_hash, response_streak
  FROM conversations WHERE task_id = $1 AND conversation_key = $2;

-- name: conversation_count_request
INSERT INTO conversations (task_id, conversation_key, requests, first_request_at)
VALUES ($1, $2, 1, now()) ON CONFLICT (task_id, conversation_key) DO UPDATE
   SET requests = conversations.requests + 1,
       first_request_at = COALESCE(conversations.first_request_at, now()), updated_at = now();

-- name: conversation_add_tool_calls
-- $3 new tool calls; they also break a run of repeated answers. Returns the total.
INSERT INTO conversations (task_id, conversation_key, tool_calls) VALUES ($1, $2, $3)
ON CONFLICT (task_id, conversation_key) DO UPDATE
   SET tool_calls = conversations.tool_calls + EXCLUDED.tool_calls,
       response_hash = NULL, response_streak = 0, updated_at = now()
RETURNING tool_calls;

-- name: conversation_tool_calls
SELECT tool_calls FROM conversations WHERE task_id = $1 AND conversation_key = $2;

-- name: strike_lock_task
SELECT status, loop_guard FROM tasks WHERE id = $1 FOR UPDATE;

-- name: strike_state
SELECT strikes, strike_at, strike_request, note IS NOT NULL AS noted, now() AS now FROM conversations
 WHERE task_id = $1 AND conversation_key = $2 FOR UPDATE;

-- name: strike_write
-- $3 strikes (NULL: leave them), $4 the answer's request id, $5 the note (NULL: keep any
-- pending one), $6 the rule it is about.
INSERT INTO conversations (task_id, conversation_key, strikes, strike_at, strike_request, note, note_reason)
VALUES ($1, $2, COALESCE($3, 0), CASE WHEN $3::integer IS NULL THEN NULL ELSE now() END, $4, $5,
        CASE WHEN $5::text IS NULL THEN NULL ELSE $6 END)
ON CONFLICT (task_id, conversation_key) DO UPDATE
   SET strikes = COALESCE($3, conversations.strikes),
       strike_at = CASE WHEN $3::integer IS NULL THEN conversations.strike_at ELSE now() END,
       strike_request = CASE WHEN $3::integer IS NULL THEN conversations.strike_request ELSE $4 END,
       note = COALESCE($5, conversations.note),
       note_reason = CASE WHEN $5::text IS NULL THEN conversations.note_reason ELSE $6 END, updated_at = now();

-- name: strike_count
UPDATE tasks SET strikes = strikes + $2, pending_notes = pending_notes + $3, updated_at = now() WHERE id = $1;

-- name: strike_peek_note
SELECT 1 FROM conversations WHERE task_id = $1 AND conversation_key = $2 AND note IS NOT NULL;

-- name: strike_lock_notes
SELECT pending_notes FROM tasks WHERE id = $1 FOR UPDATE;

-- name: strike_clear_note
-- Take the conversation's pending note: returns it (and its rule) as it was.
UPDATE conversations c SET note = NULL, note_reason = NULL, updated_at = now() FROM conversations o
 WHERE o.task_id = c.task_id AND o.conversation_key = c.conversation_key
   AND c.task_id = $1 AND c.conversation_key = $2 AND c.note IS NOT NULL RETURNING o.note, o.note_reason;

-- name: strike_uncount_note
UPDATE tasks SET pending_notes = greatest(pending_notes - 1, 0) WHERE id = $1;
