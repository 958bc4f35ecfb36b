-- An agent turn in one autocommit statement when the gateway knows the conversation's window
-- (app.admission.known_turn; the steps: migration 0013's docstring). Since 0013.
CREATE OR REPLACE FUNCTION taskgate_known_turn(
    p_token_hash text, p_loop_guard jsonb, p_key text, p_window integer,
    p_call_ids text[], p_tool_names text[], p_arguments_hashes text[], p_previews text[],
    p_result_ids text[], p_result_hashes text[], p_is_error boolean[], p_is_empty boolean[],
    p_raw_hashes text[], p_known bytea, p_new integer, p_done integer,
    p_tool_call_limit bigint, p_conversation_tool_call_limit bigint)
RETURNS TABLE (task tasks, known boolean, window_ids text[], window_names text[], window_arguments text[],
               window_results text[], window_errors boolean[], window_empty boolean[])
LANGUAGE plpgsql AS $fn$
DECLARE
    v_id text;
    v_window bytea;
    r record;
    v_calls bigint;
    v_conversation bigint;
BEGIN
    SELECT id INTO v_id FROM tasks WHERE token_hash = p_token_hash FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_known IS NOT NULL THEN
        SELECT sha256(convert_to(coalesce(string_agg(length(w.call_id) || ':' || w.call_id || ':'
                                                     || coalesce(length(w.result_hash) || ':' || w.result_hash, '-'),
                                                     ';' ORDER BY w.seq), ''), 'UTF8'))
          INTO v_window
          FROM (SELECT seq, call_id, result_hash FROM tool_calls WHERE task_id = v_id AND conversation_key = p_key
                 ORDER BY seq DESC LIMIT p_window) AS w;
    END IF;
    IF p_known IS NULL OR v_window <> p_known THEN
        RETURN QUERY
        SELECT NULL::tasks, false, coalesce(array_agg(w.call_id ORDER BY w.seq), '{}'),
               coalesce(array_agg(w.tool_name ORDER BY w.seq), '{}'),
               coalesce(array_agg(w.arguments_hash ORDER BY w.seq), '{}'),
               coalesce(array_agg(w.result_hash ORDER BY w.seq), '{}'),
               coalesce(array_agg(w.is_error ORDER BY w.seq), '{}'),
               coalesce(array_agg(w.is_empty ORDER BY w.seq), '{}')
          FROM (SELECT * FROM tool_calls WHERE task_id = v_id AND conversation_key = p_key
                 ORDER BY seq DESC LIMIT p_window) AS w;
        RETURN;
    END IF;
    SELECT * INTO r FROM taskgate_agent_turn(p_token_hash, true, p_loop_guard, p_key, 0,
        p_conversation_tool_call_limit IS NOT NULL, p_call_ids, p_tool_names, p_arguments_hashes, p_previews,
        p_result_ids, p_result_hashes, p_is_error, p_is_empty, p_raw_hashes);
    v_calls := coalesce((r.task).tool_call_limit, p_tool_call_limit);
    v_conversation := coalesce((r.task).conversation_tool_call_limit, p_conversation_tool_call_limit);
    IF NOT (r.recorded AND r.counted AND r.new_calls = p_new AND r.completed = p_done
            AND (v_calls IS NULL OR (r.task).tool_calls <= v_calls)
            AND (v_conversation IS NULL OR r.conversation_calls <= v_conversation)) THEN
        RAISE EXCEPTION 'taskgate_known_turn: the turn differs from its prediction' USING ERRCODE = 'TG001';
    END IF;
    RETURN QUERY SELECT r.task, true, NULL::text[], NULL::text[], NULL::text[], NULL::text[], NULL::boolean[],
        NULL::boolean[];
END
$fn$;
