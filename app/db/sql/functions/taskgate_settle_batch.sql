-- Settlements of many admissions in one statement (app.db.settlements, issue 39): what
-- ledger_add_usage writes for one response without tool calls or budget windows, and
-- ledger_add_answer for one with a text answer the loop guard judges (each with its
-- once-mark), for every response of a round of several at once (a round of one sends
-- that statement instead: cheaper for one row).
--
-- Each input row is one admission's settlement: p_keys its admission key, p_task_ids its
-- task, p_input_tokens and p_output_tokens, p_cost_usd dollars settled, p_release_usd
-- dollars released from hold p_reservation_ids (NULL: none), p_models (NULL: not an
-- admitted request's spend); a judged answer also p_conversation_keys (NULL: none), its
-- p_text_sha256 and p_answer_repeats (whether it counts toward the conversation's run of
-- identical answers: ledger_add_answer's $9). The tasks are locked first, in id order (the
-- order app/db/sql/admission.sql's holds_lock_tasks and every other statement that locks
-- several tasks takes), so two rounds never wait on each other in a circle; each task is
-- settled under its row lock as its own statement would be, its answers' conversation
-- rows written after it (the order admission takes). A task appearing more than once in a
-- round is updated once with the sum of its rows (usage and dollars only add up: no
-- admission rule here), its spend_daily row once per model with its count; an admission
-- key twice in a round is written once; a conversation has at most one answer in a round
-- (a second would update its row twice, which PostgreSQL refuses: the caller sends it in
-- the next round). Per input row (n, 1-based): locked (its task exists and was settled or
-- found settled under its lock), first (true: written now; false: an earlier settlement of
-- that admission had committed, nothing written; NULL: the admission is not in the log,
-- written unmarked); for an answer written now, what the repeated_response rule reads (the
-- task's status and loop_guard) and the conversation's run of identical answers
-- (answer_streak); else NULL. Its own relaxed transaction.
--
-- A function for its plan: planned once per session (plan_cache_mode =
-- force_generic_plan). As a prepared statement PostgreSQL planned it again for every
-- round: the custom plan, which sees the arrays' lengths, always looked cheaper than the
-- generic one (estimated for 10 rows), and planning its parts cost more than running them
-- (0023's taskgate_settle_usage_batch, a round of one: 620-840 µs of PostgreSQL CPU, 280-330
-- planned once; of five, 190-310 -> 80-100 µs a settlement). The tasks and admissions are
-- found by their keys (= ANY) so the generic plan reads their indexes at any table size.
-- Since 0024 (taskgate_settle_usage_batch with the judged answers: ledger_add_answer was a
-- statement per answer, 150-180 µs of PostgreSQL CPU on one connection, 80-100 µs a
-- settlement in a round of four).
CREATE OR REPLACE FUNCTION taskgate_settle_batch(
    p_keys uuid[], p_task_ids text[], p_input_tokens bigint[], p_output_tokens bigint[], p_cost_usd numeric[],
    p_release_usd numeric[], p_reservation_ids bigint[], p_models text[], p_conversation_keys text[],
    p_text_sha256 text[], p_answer_repeats boolean[])
RETURNS TABLE (n bigint, locked boolean, first boolean, status text, loop_guard jsonb, answer_streak integer)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(p_keys, p_task_ids, p_input_tokens, p_output_tokens, p_cost_usd, p_release_usd,
                             p_reservation_ids, p_models, p_conversation_keys, p_text_sha256, p_answer_repeats)
          WITH ORDINALITY AS i(key, task_id, input_tokens, output_tokens, cost_usd, release_usd, reservation_id,
                               model, conversation_key, text_sha256, answer_repeats, n)),
    locked AS (
        SELECT t.id, t.budget_id, t.status, t.loop_guard FROM tasks t WHERE t.id = ANY (p_task_ids) ORDER BY t.id FOR UPDATE),
    marked AS (
        UPDATE admissions a SET settled_at = coalesce(a.settled_at, now())
          FROM input JOIN locked ON locked.id = input.task_id
         WHERE a.key = input.key AND a.key = ANY (p_keys)
        RETURNING a.key, a.settled_at = now() AS first),
    go AS (
        SELECT DISTINCT ON (input.key) input.*, locked.budget_id FROM input JOIN locked ON locked.id = input.task_id
          LEFT JOIN marked ON marked.key = input.key
         WHERE marked.first IS NOT FALSE
         ORDER BY input.key, input.n),
    held AS (DELETE FROM reservations r USING go WHERE r.id = go.reservation_id RETURNING r.id),
    per_task AS (
        SELECT go.task_id, sum(go.input_tokens) AS input_tokens, sum(go.output_tokens) AS output_tokens,
               sum(go.cost_usd) AS cost_usd,
               sum(CASE WHEN go.reservation_id IS NULL OR held.id IS NOT NULL THEN go.release_usd ELSE 0 END)
                   AS release_usd
          FROM go LEFT JOIN held ON held.id = go.reservation_id
         GROUP BY go.task_id),
    task AS (
        UPDATE tasks SET input_tokens = tasks.input_tokens + p.input_tokens,
               output_tokens = tasks.output_tokens + p.output_tokens,
               cost_usd = tasks.cost_usd + p.cost_usd, updated_at = now(),
               reserved_usd = tasks.reserved_usd - p.release_usd
          FROM per_task p,
               (SELECT set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                                  THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS relaxed_commit
         WHERE tasks.id = p.task_id AND tasks.id = ANY (p_task_ids)
        RETURNING tasks.id),
    spent AS (
        INSERT INTO spend_daily AS s (day, task_id, model, budget_id, requests, input_tokens, output_tokens, cost_usd)
        SELECT (now() AT TIME ZONE 'UTC')::date, go.task_id, go.model, go.budget_id, count(*), sum(go.input_tokens),
               sum(go.output_tokens), sum(go.cost_usd)
          FROM go WHERE go.model IS NOT NULL
         GROUP BY go.task_id, go.model, go.budget_id
        ON CONFLICT (day, task_id, model) DO UPDATE SET requests = s.requests + EXCLUDED.requests,
           input_tokens = s.input_tokens + EXCLUDED.input_tokens, output_tokens = s.output_tokens + EXCLUDED.output_tokens,
           cost_usd = s.cost_usd + EXCLUDED.cost_usd),
    answered AS (
        INSERT INTO conversations AS c (task_id, conversation_key, response_hash, response_streak)
        SELECT go.task_id, go.conversation_key, go.text_sha256, CASE WHEN go.answer_repeats THEN 1 ELSE 0 END
          FROM go WHERE go.conversation_key IS NOT NULL
        ON CONFLICT (task_id, conversation_key) DO UPDATE
           SET response_streak = CASE WHEN EXCLUDED.response_streak = 0 THEN 0
                                      WHEN c.response_hash = EXCLUDED.response_hash
                                      THEN c.response_streak + 1 ELSE 1 END,
               response_hash = EXCLUDED.response_hash, updated_at = now()
        RETURNING c.task_id, c.conversation_key, c.response_streak)
    SELECT input.n, locked.id IS NOT NULL AS locked, marked.first,
           CASE WHEN answered.task_id IS NOT NULL THEN locked.status END,
           CASE WHEN answered.task_id IS NOT NULL THEN locked.loop_guard END, answered.response_streak
      FROM input LEFT JOIN locked ON locked.id = input.task_id LEFT JOIN marked ON marked.key = input.key
           LEFT JOIN answered ON answered.task_id = input.task_id AND answered.conversation_key = input.conversation_key
     ORDER BY input.n;
END
$fn$;
