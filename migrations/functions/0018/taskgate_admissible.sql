-- The admission rule: whether task t may admit one more request (active and under its
-- request, token and duration limits; with p_reservation_usd, the dollars this request
-- may cost, also settled dollars + p_reservation_usd within cost_limit_usd). Every
-- statement and function that counts a request decides with it (taskgate_agent_turn and
-- the locked path's lock and count, app/db/sql/admission.sql, call it; the fast path and
-- the budget lease paths take its text, app.admission.limits.ADMISSIBLE);
-- app.admission.limits.limit_breach only explains a refusal (which limit, its numbers),
-- and tests/test_admission_rule.py keeps the two in step. STABLE (now()). LANGUAGE sql,
-- one SELECT of an expression: app.db.sql.expression reads it so. Since 0018.
CREATE OR REPLACE FUNCTION taskgate_admissible(t tasks, p_reservation_usd numeric DEFAULT NULL)
RETURNS boolean LANGUAGE sql STABLE AS $fn$
SELECT t.status = 'active' AND t.admitted_requests < t.request_limit
   AND (t.token_limit IS NULL OR t.input_tokens + t.output_tokens < t.token_limit)
   AND (t.max_duration_s IS NULL OR t.first_admitted_at IS NULL
        OR now() < t.first_admitted_at + t.max_duration_s * interval '1 second')
   AND (t.cost_limit_usd IS NULL OR p_reservation_usd IS NULL OR t.cost_usd + p_reservation_usd <= t.cost_limit_usd)
$fn$;
