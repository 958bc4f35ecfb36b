-- No longer called (since 0024): taskgate_settle_batch, which settles judged answers too,
-- replaced it. Kept so that a gateway of the release before, still running while the
-- gateways of this one replace it, settles as it did; a later migration drops it.
--
-- Settlements of many admissions in one statement (app.db.settlements, issue 39): what
-- app.db.commits.settling + ledger_add_usage write for one response without tool calls,
-- budget windows or a judged answer, for every response of a round at once.
--
-- Each input row is one admission's settlement: p_keys its admission key, p_task_ids its
-- task, p_input_tokens and p_output_tokens, p_cost_usd dollars settled, p_release_usd
-- dollars released from hold p_reservation_ids (NULL: none), p_models (NULL: not an
-- admitted request's spend). The tasks are locked first, in id order (the order
-- app/db/sql/admission.sql's holds_lock_tasks and every other statement that locks
-- several tasks takes), so two rounds never wait on each other in a circle; each task is
-- settled under its row lock as its own statement would be. A task appearing more than
-- once in a round is updated once with the sum of its rows (usage and dollars only add up:
-- no admission rule here), its spend_daily row once per model with its count; an
-- admission key twice in a round is written once. Per input row (n, 1-based): locked (its
-- task exists and was settled or found settled under its lock), first (true: written now;
-- false: an earlier settlement of that admission had committed, nothing written; NULL: the
-- admission is not in the log, written unmarked). Its own relaxed transaction.
--
-- A function for its plan: planned once per session (plan_cache_mode =
-- force_generic_plan). As a prepared statement PostgreSQL planned it again for every
-- round: the custom plan, which sees the arrays' lengths, always looked cheaper than the
-- generic one (estimated for 10 rows), and planning its eight parts cost more than
-- running them (a round of one settlement: 620-840 µs of PostgreSQL CPU, 280-330 µs
-- planned once; of five, 190-310 -> 80-100 µs a settlement). The tasks and admissions are found by
-- their keys (= ANY) so the generic plan reads their indexes at any table size.
-- Since 0023.
CREATE OR REPLACE FUNCTION taskgate_settle_usage_batch(
    p_keys uuid[], p_task_ids text[], p_input_tokens bigint[], p_output_tokens bigint[], p_cost_usd numeric[],
    p_release_usd numeric[], p_reservation_ids bigint[], p_models text[])
RETURNS TABLE (n bigint, locked boolean, first boolean)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(p_keys, p_task_ids, p_input_tokens, p_output_tokens, p_cost_usd, p_release_usd,
                             p_reservation_ids, p_models)
          WITH ORDINALITY AS i(key, task_id, input_tokens, output_tokens, cost_usd, release_usd, reservation_id,
                               model, n)),
    locked AS (
        SELECT t.id, t.budget_id FROM tasks t WHERE t.id = ANY (p_task_ids) ORDER BY t.id FOR UPDATE),
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
           cost_usd = s.cost_usd + EXCLUDED.cost_usd)
    SELECT input.n, locked.id IS NOT NULL AS locked, marked.first
      FROM input LEFT JOIN locked ON locked.id = input.task_id LEFT JOIN marked ON marked.key = input.key
     ORDER BY input.n;
END
$fn$;
