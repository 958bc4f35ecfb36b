-- Whether a one-statement path may decide task t: none of the settings only the locked
-- path decides (a dollar ceiling, allowed models, a conversation request or duration
-- ceiling). Not the admission rule (taskgate_admissible) but which path applies it: the
-- fast path and the budget lease paths (its text: app.admission.limits.ADMISSIBLE) and
-- taskgate_agent_turn require it; app.admission.turn.eligible predicts it from the row
-- last seen (tests/test_admission_rule.py). Since 0018.
CREATE OR REPLACE FUNCTION taskgate_one_statement(t tasks)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $fn$
SELECT t.cost_limit_usd IS NULL AND t.allowed_models IS NULL
   AND t.conversation_request_limit IS NULL AND t.conversation_max_duration_s IS NULL
$fn$;
