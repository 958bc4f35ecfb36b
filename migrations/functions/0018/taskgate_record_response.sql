-- A response's tool calls and usage in one statement (app.guard.ledger.record_response).
-- Since 0011; 0015: keeps the session's synchronous_commit under synchronous standbys.
CREATE OR REPLACE FUNCTION taskgate_record_response(
    p_task_id text, p_key text, p_window integer,
    p_add_usage boolean,  -- false: the counters are left alone and the hold row stays
    p_input_tokens bigint, p_output_tokens bigint, p_cost_usd numeric, p_release_usd numeric,
    p_reservation_id bigint,
    p_call_ids text[], p_tool_names text[], p_arguments_hashes text[], p_previews text[])
RETURNS TABLE (task tasks, new_calls integer, conversation_calls bigint, window_ids text[],
               window_names text[], window_arguments text[], window_results text[],
               window_errors boolean[], window_empty boolean[])
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    t tasks;
    v_new integer := 0;
    v_conv bigint := 0;
    v_release numeric := 0;
BEGIN
    -- until the transaction ends: off without synchronous standbys, else the session's own level
    PERFORM set_config('synchronous_commit', CASE WHEN current_setting('synchronous_standby_names') = ''
                                                  THEN 'off' ELSE current_setting('synchronous_commit') END, true);
    SELECT * INTO t FROM tasks WHERE id = p_task_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_add_usage THEN
        v_release := p_release_usd;
        IF p_reservation_id IS NOT NULL THEN  -- a sweep or an admin may have released it
            DELETE FROM reservations WHERE id = p_reservation_id;
            IF NOT FOUND THEN
                v_release := 0;
            END IF;
        END IF;
    END IF;
    IF cardinality(p_call_ids) > 0 THEN
        WITH added AS (
            INSERT INTO tool_calls (task_id, call_id, conversation_key, tool_name, arguments_hash,
                                    arguments_preview)
            SELECT t.id, c.call_id, p_key, c.tool_name, c.arguments_hash, c.arguments_preview
              FROM unnest(p_call_ids, p_tool_names, p_arguments_hashes, p_previews) WITH ORDINALITY
                   AS c(call_id, tool_name, arguments_hash, arguments_preview, n)
             ORDER BY c.n
            ON CONFLICT (task_id, call_id) DO NOTHING RETURNING 1)
        SELECT count(*) INTO v_new FROM added;
    END IF;
    IF p_add_usage OR v_new > 0 THEN
        UPDATE tasks SET input_tokens = input_tokens + CASE WHEN p_add_usage THEN p_input_tokens ELSE 0 END,
               output_tokens = output_tokens + CASE WHEN p_add_usage THEN p_output_tokens ELSE 0 END,
               cost_usd = cost_usd + CASE WHEN p_add_usage THEN p_cost_usd ELSE 0 END,
               reserved_usd = reserved_usd - v_release,
               tool_calls = tool_calls + v_new,
               updated_at = now()
         WHERE id = t.id RETURNING * INTO t;
    END IF;
    IF v_new > 0 THEN  -- new calls also break a run of repeated answers
        INSERT INTO conversations (task_id, conversation_key, tool_calls) VALUES (t.id, p_key, v_new)
        ON CONFLICT (task_id, conversation_key) DO UPDATE
           SET tool_calls = conversations.tool_calls + EXCLUDED.tool_calls,
               response_hash = NULL, response_streak = 0, updated_at = now()
        RETURNING tool_calls INTO v_conv;
    END IF;
    RETURN QUERY
        SELECT t, v_new, v_conv,
               array_agg(w.call_id ORDER BY w.seq), array_agg(w.tool_name ORDER BY w.seq),
               array_agg(w.arguments_hash ORDER BY w.seq), array_agg(w.result_hash ORDER BY w.seq),
               array_agg(w.is_error ORDER BY w.seq), array_agg(w.is_empty ORDER BY w.seq)
          FROM (SELECT seq, call_id, tool_name, arguments_hash, result_hash, is_error, is_empty
                  FROM tool_calls WHERE task_id = t.id AND conversation_key = p_key
                 ORDER BY seq DESC LIMIT CASE WHEN v_new > 0 THEN p_window ELSE 0 END) AS w;
END
$fn$;
