-- Warning thresholds of a task (app.budgets.task_thresholds): the tasks a process served
-- lately, what they used of each limit, and the crossings already announced.

-- name: task_thresholds_current
-- Tasks $1 (text[]) with a request, token or dollar limit and thresholds (NULL: the
-- default), their counters, and the crossings already announced at each limit's current
-- value ("<limit>:<threshold>"): a raised or lowered limit has none yet.
SELECT t.id, t.request_limit, t.token_limit, t.cost_limit_usd, t.thresholds, t.admitted_requests,
       t.input_tokens + t.output_tokens AS tokens, t.cost_usd, t.reserved_usd,
       (SELECT coalesce(array_agg(x.limit_name || ':' || x.threshold), '{}') FROM task_warnings x
         WHERE x.task_id = t.id
           AND x.limit_value = CASE x.limit_name WHEN 'request_limit' THEN t.request_limit
                                                 WHEN 'token_limit' THEN t.token_limit
                                                 ELSE t.cost_limit_usd END) AS announced
  FROM tasks t
 WHERE t.id = ANY($1::text[]) AND coalesce(cardinality(t.thresholds), 1) > 0;

-- name: task_warning_insert
-- One crossing ($1 task, $2 limit, $3 its value, $4 threshold): a row only for the first
-- process to see it; NULL when another wrote it already.
INSERT INTO task_warnings (task_id, limit_name, limit_value, threshold) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING crossed_at;

-- name: task_warnings_of
-- The crossings of task $1 at its limits' current values, oldest first (the admin API).
SELECT x.limit_name, x.threshold, x.crossed_at
  FROM task_warnings x JOIN tasks t ON t.id = x.task_id
 WHERE x.task_id = $1
   AND x.limit_value = CASE x.limit_name WHEN 'request_limit' THEN t.request_limit
                                         WHEN 'token_limit' THEN t.token_limit
                                         ELSE t.cost_limit_usd END
 ORDER BY x.crossed_at, x.threshold;
