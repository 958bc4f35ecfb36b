-- An agent turn's request side under the task's row lock: records its tool calls and results,
-- counts the request when the task admits one more, returns the conversation's window
-- and the clock the rule read, now() (rule_now: a refusal's numbers quote it)
-- (app.admission.turn). Since 0009; 0012: a new call carries its result in one row;
-- 0018: the rule and the path as taskgate_admissible and taskgate_one_statement;
-- 0022: rule_now.
CREATE OR REPLACE FUNCTION taskgate_agent_turn(
    p_token_hash text, p_expect boolean, p_loop_guard jsonb, p_key text, p_window integer,
    p_conversation_limit boolean,  -- a conversation tool-call ceiling applies whatever the task says
    p_call_ids text[], p_tool_names text[], p_arguments_hashes text[], p_previews text[],
    p_result_ids text[], p_result_hashes text[], p_is_error boolean[], p_is_empty boolean[],
    p_raw_hashes text[])
RETURNS TABLE (task tasks, recorded boolean, counted boolean, new_calls integer, completed integer,
               conversation_calls bigint, window_ids text[], window_names text[], window_arguments text[],
               window_results text[], window_errors boolean[], window_empty boolean[], rule_now timestamptz)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    t tasks;
    v_new integer := 0;
    v_done integer := 0;
    v_conv bigint := 0;
    v_counted boolean;
BEGIN
    SELECT * INTO t FROM tasks WHERE token_hash = p_token_hash FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT (p_expect AND t.status = 'active' AND t.budget_id IS NULL AND taskgate_one_statement(t)
            AND coalesce(t.loop_guard, '{}') = coalesce(p_loop_guard, '{}')) THEN
        RETURN QUERY SELECT t, false, false, 0, 0, 0::bigint, NULL::text[], NULL::text[], NULL::text[],
                            NULL::text[], NULL::boolean[], NULL::boolean[], now();
        RETURN;
    END IF;
    IF cardinality(p_call_ids) > 0 THEN  -- a new call carries its result in (the first one for its id)
        WITH added AS (
            INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash,
                                    arguments_preview, result_hash, is_error, is_empty, raw_result_hash,
                                    completed_at)
            SELECT t.id, c.call_id, p_key, c.tool_name, c.arguments_hash, c.arguments_preview,
                   r.result_hash, r.is_error, r.is_empty, r.raw_result_hash,
                   CASE WHEN r.result_hash IS NOT NULL THEN now() END
              FROM unnest(p_call_ids, p_tool_names, p_arguments_hashes, p_previews) WITH ORDINALITY
                   AS c(call_id, tool_name, arguments_hash, arguments_preview, n)
              LEFT JOIN (  -- the first result per id, joined by id (no per-call scan of the results)
                   SELECT DISTINCT ON (x.call_id) x.call_id, x.result_hash, x.is_error, x.is_empty,
                          x.raw_result_hash
                     FROM unnest(p_result_ids, p_result_hashes, p_is_error, p_is_empty, p_raw_hashes)
                          WITH ORDINALITY AS x(call_id, result_hash, is_error, is_empty, raw_result_hash, n)
                    ORDER BY x.call_id, x.n) AS r ON r.call_id = c.call_id
             ORDER BY c.n
            ON CONFLICT (task_id, call_id) DO NOTHING RETURNING result_hash IS NOT NULL AS completed)
        SELECT count(*), count(*) FILTER (WHERE completed) INTO v_new, v_done FROM added;
    END IF;
    IF cardinality(p_result_ids) > v_done THEN  -- results of calls the ledger already held
        WITH done AS (
            UPDATE tool_calls c SET result_hash = r.result_hash, is_error = r.is_error, is_empty = r.is_empty,
                   raw_result_hash = r.raw_result_hash, completed_at = now()
              FROM unnest(p_result_ids, p_result_hashes, p_is_error, p_is_empty, p_raw_hashes)
                   AS r(call_id, result_hash, is_error, is_empty, raw_result_hash)
             WHERE c.task_id = t.id AND c.call_id = r.call_id AND c.result_hash IS NULL RETURNING 1)
        SELECT v_done + count(*) INTO v_done FROM done;
    END IF;
    IF v_new > 0 THEN  -- new calls also break a run of repeated answers
        INSERT INTO conversations (task_id, conversation_key, tool_calls) VALUES (t.id, p_key, v_new)
        ON CONFLICT (task_id, conversation_key) DO UPDATE
           SET tool_calls = conversations.tool_calls + EXCLUDED.tool_calls,
               response_hash = NULL, response_streak = 0, updated_at = now()
        RETURNING tool_calls INTO v_conv;
    ELSIF (p_conversation_limit OR t.conversation_tool_call_limit IS NOT NULL) AND v_done > 0 THEN
        SELECT coalesce(max(tool_calls), 0) INTO v_conv FROM conversations
         WHERE task_id = t.id AND conversation_key = p_key;
    END IF;
    v_counted := taskgate_admissible(t);  -- the admission rule, on the locked row
    IF v_counted OR v_new > 0 THEN
        UPDATE tasks SET tool_calls = tool_calls + v_new,
               admitted_requests = admitted_requests + CASE WHEN v_counted THEN 1 ELSE 0 END,
               first_admitted_at = CASE WHEN v_counted THEN COALESCE(first_admitted_at, now())
                                        ELSE first_admitted_at END,
               updated_at = now()
         WHERE id = t.id RETURNING * INTO t;
    END IF;
    RETURN QUERY
        SELECT t, true, v_counted, v_new, v_done, v_conv,
               array_agg(w.call_id ORDER BY w.seq), array_agg(w.tool_name ORDER BY w.seq),
               array_agg(w.arguments_hash ORDER BY w.seq), array_agg(w.result_hash ORDER BY w.seq),
               array_agg(w.is_error ORDER BY w.seq), array_agg(w.is_empty ORDER BY w.seq), now()
          FROM (SELECT seq, call_id, tool_name, arguments_hash, result_hash, is_error, is_empty
                  FROM tool_calls WHERE task_id = t.id AND conversation_key = p_key
                 ORDER BY seq DESC LIMIT CASE WHEN v_new + v_done > 0 THEN p_window ELSE 0 END) AS w;
END
$fn$;
