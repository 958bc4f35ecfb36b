-- The escrow leases of budget windows (app.budgets.escrow, app.budgets.fast_path): a
-- gateway slot's lease of a window's requests, spent under the task's row lock without
-- locking the window; taken, reclaimed and folded back under the window's lock.
--
-- Lock order, everywhere: task row, then budget windows root first (budgets.depth), then
-- lease rows root first too (ORDER BY depth ... FOR UPDATE).
--
-- Shared parts are written out in each statement that runs them, so each reads whole:
-- - pays: lease l of budget b can pay one request: some of it unspent, unexpired, granted
--   under the budget's request limit; the budget has no dollars, model limits or rates
--   (the locked path decides those) and is not paused (read here, never cached:
--   app.budgets.pause); its window is under its token limit (tokens are reported after
--   the fact, so a token limit admits while the window is under it; the window row is
--   read only for a budget with a token limit);
-- - room: what each lease paid from has left in its window, returned by the statement
--   that spends it (app.budgets.room.ROOM_RETURNING, and ROOM_ARRAYS as arrays in chain
--   order in the fast statements' final SELECT);
-- - counted: the fast path's counted request (app.admission.limits.COUNT_REQUEST under
--   taskgate_admissible and taskgate_one_statement, sent as their text: app.db.sql.inline)
--   and its admissions row (app.db.commits).
-- tests/test_sql_budgets.py checks every copy against the others and the fragments their
-- modules still own.

-- name: budget_chain
-- A budget ($1) and its ancestors, root first. The walk climbs only to a shallower parent
-- (the API nests a budget one level under its parent), so a parent cycle written past the
-- API ends it: each budget once, at most 4 (budgets.depth is 1 to 4).
WITH RECURSIVE up AS (
    SELECT * FROM budgets WHERE id = $1
    UNION ALL
    SELECT b.* FROM budgets b JOIN up ON b.id = up.parent_id AND b.depth < up.depth
) SELECT * FROM up ORDER BY depth;

-- name: lease_spend
-- Spend one request from holder $1's lease of each budget of $3 whose window holds $2
-- (the gateway's window clock) and that can pay, the leases locked root first; the window
-- rows are read, never locked. Returns a row per lease that paid, with its room.
WITH mine AS (
    SELECT l.budget_id, l.window_start FROM budget_leases l JOIN budgets b ON b.id = l.budget_id
     WHERE l.holder = $1 AND l.budget_id = ANY($3::text[])
       AND l.window_start <= $2 AND (l.window_end IS NULL OR $2 < l.window_end)
       AND l.expires_at > now()
     ORDER BY b.depth FOR UPDATE OF l)
UPDATE budget_leases l SET spent = l.spent + 1
  FROM mine, budgets b, budget_windows w
 WHERE l.holder = $1 AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
   AND b.id = l.budget_id AND w.budget_id = l.budget_id AND w.window_start = l.window_start
   AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
   AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
   AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
   AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                   WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start) < b.token_limit)
RETURNING l.budget_id, b.depth AS room_depth, b.request_limit AS room_limit, b.token_limit AS room_token_limit,
       w.window_end AS room_reset, b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
       CASE WHEN b.request_limit IS NULL THEN NULL
            WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
            THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
            ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                  WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left;

-- name: lease_lock_window
-- Create (if missing) and lock budget $1's window starting $2 (ending $3: NULL, never).
INSERT INTO budget_windows (budget_id, window_start, window_end) VALUES ($1, $2, $3)
ON CONFLICT (budget_id, window_start) DO UPDATE SET window_end = EXCLUDED.window_end RETURNING *;

-- name: lease_reclaim
-- Cut every lease of window ($1, $2) to what it spent (after locking them: a lease being
-- spent right now is waited for); the window's leased_requests loses what they held
-- unspent. Returns the window's row.
WITH cut AS (
    SELECT holder, granted - spent AS back FROM budget_leases
     WHERE budget_id = $1 AND window_start = $2 AND granted > spent FOR UPDATE),
done AS (
    UPDATE budget_leases l SET granted = l.spent FROM cut
     WHERE l.holder = cut.holder AND l.budget_id = $1 AND l.window_start = $2 RETURNING cut.back)
UPDATE budget_windows SET leased_requests = leased_requests - COALESCE((SELECT sum(back) FROM done), 0)
 WHERE budget_id = $1 AND window_start = $2 RETURNING *;

-- name: lease_grant
-- Holder $1's lease of window ($2, $3; ending $4) gets $5 more requests (under request
-- limit $6, for $7 seconds); what it spent so far is folded into the window's
-- admitted_requests (and out of its leased_requests).
WITH old AS (
    SELECT spent FROM budget_leases WHERE holder = $1 AND budget_id = $2 AND window_start = $3 FOR UPDATE),
lease AS (
    INSERT INTO budget_leases AS l (holder, budget_id, window_start, window_end, granted, spent,
                                    request_limit, expires_at)
    VALUES ($1, $2, $3, $4, $5, 0, $6, now() + $7 * interval '1 second')
    ON CONFLICT (holder, budget_id, window_start) DO UPDATE
       SET granted = l.granted - l.spent + EXCLUDED.granted, spent = 0,
           request_limit = EXCLUDED.request_limit, expires_at = EXCLUDED.expires_at
    RETURNING 1)
UPDATE budget_windows
   SET admitted_requests = admitted_requests + COALESCE((SELECT spent FROM old), 0),
       leased_requests = leased_requests - COALESCE((SELECT spent FROM old), 0) + $5
 WHERE budget_id = $2 AND window_start = $3;

-- name: lease_lock_expired
-- The windows holding expired leases (at most $1 leases examined), locked root first.
SELECT w.budget_id, w.window_start FROM budget_windows w JOIN budgets b ON b.id = w.budget_id
 WHERE (w.budget_id, w.window_start) IN (
       SELECT budget_id, window_start FROM budget_leases WHERE expires_at < now() LIMIT $1)
 ORDER BY b.depth, w.budget_id, w.window_start FOR UPDATE OF w;

-- name: lease_fold_expired
-- Fold the expired leases of the windows ($1 budget ids, $2 starts; locked by
-- lease_lock_expired) back into them: spent into admitted_requests, granted out of
-- leased_requests. Returns how many leases were folded.
WITH doomed AS (
    SELECT l.holder, l.budget_id, l.window_start
      FROM budget_leases l JOIN budgets b ON b.id = l.budget_id
           JOIN unnest($1::text[], $2::timestamptz[]) AS k(budget_id, window_start)
           ON l.budget_id = k.budget_id AND l.window_start = k.window_start
     WHERE l.expires_at < now() ORDER BY b.depth, l.budget_id, l.holder FOR UPDATE OF l),
gone AS (
    DELETE FROM budget_leases l USING doomed d
     WHERE l.holder = d.holder AND l.budget_id = d.budget_id AND l.window_start = d.window_start
       AND l.expires_at < now()
    RETURNING l.budget_id, l.window_start, l.granted, l.spent),
per_window AS (
    SELECT budget_id, window_start, sum(granted) AS granted, sum(spent) AS spent, count(*) AS n
      FROM gone GROUP BY budget_id, window_start),
folded AS (
    UPDATE budget_windows w SET admitted_requests = w.admitted_requests + p.spent,
           leased_requests = w.leased_requests - p.granted
      FROM per_window p WHERE w.budget_id = p.budget_id AND w.window_start = p.window_start RETURNING p.n)
SELECT COALESCE(sum(n), 0) FROM folded;

-- name: lease_fast_by_token
-- The fast path of a task with a budget (one statement, its own transaction): the request
-- counted on the task by its token hash $1 under the fast path's conditions (as admission_fast, but with
-- the budget $4 whose chain is $5, root first) and one request spent from holder $2's
-- lease, in the window of $3, of each budget of the chain as lease_spend does (each
-- budget of $5 must still have the one before it as its parent); $6 the admission key
-- and $7 the request id (its admissions row, with the windows it was counted in).
-- When the task was counted but a lease could not pay, or the counted task's budget is
-- not $4, the statement aborts (taskgate_abort): nothing is written, and the locked path
-- decides. The budget is checked on the counted row, not in the UPDATE's WHERE, where
-- the planner could pick the budget's index and scan every task of the budget (it did,
-- on tables not analysed yet) instead of the unique token or id. The budget rows are
-- joined by id, each checked against its place in $5 with array_position: joining
-- unnest($5) WITH ORDINALITY instead cost the statement as much PostgreSQL CPU as the
-- whole plain fast path. A longer chain first locks its
-- leases root first (mine).
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE token_hash = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks)
    RETURNING *),
mine AS (
    SELECT l.budget_id, l.window_start FROM budget_leases l
     WHERE l.holder = $2 AND l.budget_id = ANY($5::text[]) AND EXISTS (SELECT 1 FROM counted)
       AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
       AND l.expires_at > now()
     ORDER BY array_position($5::text[], l.budget_id) FOR UPDATE),
paid AS (
    UPDATE budget_leases l SET spent = l.spent + 1
      FROM mine, budgets b, budget_windows w
     WHERE l.holder = $2 AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
       AND w.budget_id = l.budget_id AND w.window_start = l.window_start AND b.id = l.budget_id
       AND b.parent_id IS NOT DISTINCT FROM ($5::text[])[array_position($5::text[], b.id) - 1]
       AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
       AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
       AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
       AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                       WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start)
                                     < b.token_limit)
    RETURNING l.budget_id, l.window_start, b.depth AS room_depth, b.request_limit AS room_limit,
           b.token_limit AS room_token_limit, w.window_end AS room_reset,
           b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
           CASE WHEN b.request_limit IS NULL THEN NULL
                WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
                THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
                ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                      WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $6, c.id, $7, $5::text[], (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) FROM paid)
      FROM counted c)
SELECT c.*, p.*
  FROM counted c,
       (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) AS lease_window_starts,
               array_agg(room_left ORDER BY array_position($5::text[], budget_id)) AS room_requests,
               array_agg(room_tokens_left ORDER BY array_position($5::text[], budget_id)) AS room_tokens,
               array_agg(room_limit ORDER BY array_position($5::text[], budget_id)) AS room_limits,
               array_agg(room_token_limit ORDER BY array_position($5::text[], budget_id)) AS room_token_limits,
               array_agg(room_reset ORDER BY array_position($5::text[], budget_id)) AS room_resets
          FROM paid) p
 WHERE CASE WHEN c.budget_id IS DISTINCT FROM $4
                 OR coalesce(cardinality(p.lease_window_starts), 0) < cardinality($5::text[])
            THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END;

-- name: lease_fast_by_id
-- lease_fast_by_token, the task by its id $1.
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE id = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks)
    RETURNING *),
mine AS (
    SELECT l.budget_id, l.window_start FROM budget_leases l
     WHERE l.holder = $2 AND l.budget_id = ANY($5::text[]) AND EXISTS (SELECT 1 FROM counted)
       AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
       AND l.expires_at > now()
     ORDER BY array_position($5::text[], l.budget_id) FOR UPDATE),
paid AS (
    UPDATE budget_leases l SET spent = l.spent + 1
      FROM mine, budgets b, budget_windows w
     WHERE l.holder = $2 AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
       AND w.budget_id = l.budget_id AND w.window_start = l.window_start AND b.id = l.budget_id
       AND b.parent_id IS NOT DISTINCT FROM ($5::text[])[array_position($5::text[], b.id) - 1]
       AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
       AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
       AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
       AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                       WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start)
                                     < b.token_limit)
    RETURNING l.budget_id, l.window_start, b.depth AS room_depth, b.request_limit AS room_limit,
           b.token_limit AS room_token_limit, w.window_end AS room_reset,
           b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
           CASE WHEN b.request_limit IS NULL THEN NULL
                WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
                THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
                ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                      WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $6, c.id, $7, $5::text[], (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) FROM paid)
      FROM counted c)
SELECT c.*, p.*
  FROM counted c,
       (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) AS lease_window_starts,
               array_agg(room_left ORDER BY array_position($5::text[], budget_id)) AS room_requests,
               array_agg(room_tokens_left ORDER BY array_position($5::text[], budget_id)) AS room_tokens,
               array_agg(room_limit ORDER BY array_position($5::text[], budget_id)) AS room_limits,
               array_agg(room_token_limit ORDER BY array_position($5::text[], budget_id)) AS room_token_limits,
               array_agg(room_reset ORDER BY array_position($5::text[], budget_id)) AS room_resets
          FROM paid) p
 WHERE CASE WHEN c.budget_id IS DISTINCT FROM $4
                 OR coalesce(cardinality(p.lease_window_starts), 0) < cardinality($5::text[])
            THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END;

-- name: lease_fast_one_by_token
-- lease_fast_by_token for a chain of one budget ($4), whose one lease row is updated
-- directly (nothing to order).
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE token_hash = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks)
    RETURNING *),
paid AS (
    UPDATE budget_leases l SET spent = l.spent + 1
      FROM budgets b, budget_windows w
     WHERE l.holder = $2 AND l.budget_id = $4 AND EXISTS (SELECT 1 FROM counted)
       AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
       AND w.budget_id = l.budget_id AND w.window_start = l.window_start AND b.id = l.budget_id
       AND b.parent_id IS NOT DISTINCT FROM ($5::text[])[array_position($5::text[], b.id) - 1]
       AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
       AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
       AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
       AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                       WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start)
                                     < b.token_limit)
    RETURNING l.budget_id, l.window_start, b.depth AS room_depth, b.request_limit AS room_limit,
           b.token_limit AS room_token_limit, w.window_end AS room_reset,
           b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
           CASE WHEN b.request_limit IS NULL THEN NULL
                WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
                THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
                ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                      WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $6, c.id, $7, $5::text[], (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) FROM paid)
      FROM counted c)
SELECT c.*, p.*
  FROM counted c,
       (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) AS lease_window_starts,
               array_agg(room_left ORDER BY array_position($5::text[], budget_id)) AS room_requests,
               array_agg(room_tokens_left ORDER BY array_position($5::text[], budget_id)) AS room_tokens,
               array_agg(room_limit ORDER BY array_position($5::text[], budget_id)) AS room_limits,
               array_agg(room_token_limit ORDER BY array_position($5::text[], budget_id)) AS room_token_limits,
               array_agg(room_reset ORDER BY array_position($5::text[], budget_id)) AS room_resets
          FROM paid) p
 WHERE CASE WHEN c.budget_id IS DISTINCT FROM $4
                 OR coalesce(cardinality(p.lease_window_starts), 0) < cardinality($5::text[])
            THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END;

-- name: lease_fast_one_by_id
-- lease_fast_one_by_token, the task by its id $1.
WITH counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE id = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks)
    RETURNING *),
paid AS (
    UPDATE budget_leases l SET spent = l.spent + 1
      FROM budgets b, budget_windows w
     WHERE l.holder = $2 AND l.budget_id = $4 AND EXISTS (SELECT 1 FROM counted)
       AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
       AND w.budget_id = l.budget_id AND w.window_start = l.window_start AND b.id = l.budget_id
       AND b.parent_id IS NOT DISTINCT FROM ($5::text[])[array_position($5::text[], b.id) - 1]
       AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
       AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
       AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
       AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                       WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start)
                                     < b.token_limit)
    RETURNING l.budget_id, l.window_start, b.depth AS room_depth, b.request_limit AS room_limit,
           b.token_limit AS room_token_limit, w.window_end AS room_reset,
           b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
           CASE WHEN b.request_limit IS NULL THEN NULL
                WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
                THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
                ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                      WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $6, c.id, $7, $5::text[], (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) FROM paid)
      FROM counted c)
SELECT c.*, p.*
  FROM counted c,
       (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) AS lease_window_starts,
               array_agg(room_left ORDER BY array_position($5::text[], budget_id)) AS room_requests,
               array_agg(room_tokens_left ORDER BY array_position($5::text[], budget_id)) AS room_tokens,
               array_agg(room_limit ORDER BY array_position($5::text[], budget_id)) AS room_limits,
               array_agg(room_token_limit ORDER BY array_position($5::text[], budget_id)) AS room_token_limits,
               array_agg(room_reset ORDER BY array_position($5::text[], budget_id)) AS room_resets
          FROM paid) p
 WHERE CASE WHEN c.budget_id IS DISTINCT FROM $4
                 OR coalesce(cardinality(p.lease_window_starts), 0) < cardinality($5::text[])
            THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END;

-- name: lease_first_by_token
-- The fast path of a task this process has not seen yet, with or without a budget (by its token hash $1):
-- as lease_fast_by_token, the chain read from the counted task's budget (none: the
-- plain fast path), its leases locked root first. Returns the chain's ids too
-- (lease_chain, for app.budgets.escrow.remember). $4/$5: the admission key and request id.
-- The chain climbs only to a shallower parent, as budget_chain's (a cycle ends it).
WITH RECURSIVE counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE token_hash = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks)
    RETURNING *),
up AS (
    SELECT b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,
           b.model_limits, b.requests_per_minute, b.tokens_per_minute
      FROM budgets b JOIN counted ON b.id = counted.budget_id
    UNION ALL
    SELECT b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,
           b.model_limits, b.requests_per_minute, b.tokens_per_minute
      FROM budgets b JOIN up ON b.id = up.parent_id AND b.depth < up.depth),
mine AS (
    SELECT l.budget_id, l.window_start FROM budget_leases l JOIN up b ON b.id = l.budget_id
     WHERE l.holder = $2 AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
       AND l.expires_at > now()
     ORDER BY b.depth FOR UPDATE OF l),
paid AS (
    UPDATE budget_leases l SET spent = l.spent + 1 FROM mine, up b, budget_windows w
     WHERE l.holder = $2 AND l.budget_id = b.id AND w.budget_id = l.budget_id AND w.window_start = l.window_start
       AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
       AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
       AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
       AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
       AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                       WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start)
                                     < b.token_limit)
    RETURNING l.budget_id, l.window_start, b.depth AS room_depth, b.request_limit AS room_limit,
           b.token_limit AS room_token_limit, w.window_end AS room_reset,
           b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
           CASE WHEN b.request_limit IS NULL THEN NULL
                WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
                THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
                ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                      WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $4, c.id, $5, (SELECT array_agg(id ORDER BY depth) FROM up),
           (SELECT array_agg(p.window_start ORDER BY u.depth) FROM paid p JOIN up u ON u.id = p.budget_id)
      FROM counted c)
SELECT c.*, (SELECT array_agg(id ORDER BY depth) FROM up) AS lease_chain, r.*
  FROM counted c,
       (SELECT array_agg(window_start ORDER BY room_depth) AS lease_window_starts,
               array_agg(room_left ORDER BY room_depth) AS room_requests,
               array_agg(room_tokens_left ORDER BY room_depth) AS room_tokens,
               array_agg(room_limit ORDER BY room_depth) AS room_limits,
               array_agg(room_token_limit ORDER BY room_depth) AS room_token_limits,
               array_agg(room_reset ORDER BY room_depth) AS room_resets
          FROM paid) r
 WHERE CASE WHEN (SELECT count(*) FROM paid) < (SELECT count(*) FROM up)
            THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END;

-- name: lease_first_by_id
-- lease_first_by_token, the task by its id $1.
WITH RECURSIVE counted AS (
    UPDATE tasks SET admitted_requests = admitted_requests + 1,
           first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()
     WHERE id = $1 AND taskgate_admissible(tasks) AND taskgate_one_statement(tasks)
    RETURNING *),
up AS (
    SELECT b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,
           b.model_limits, b.requests_per_minute, b.tokens_per_minute
      FROM budgets b JOIN counted ON b.id = counted.budget_id
    UNION ALL
    SELECT b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,
           b.model_limits, b.requests_per_minute, b.tokens_per_minute
      FROM budgets b JOIN up ON b.id = up.parent_id AND b.depth < up.depth),
mine AS (
    SELECT l.budget_id, l.window_start FROM budget_leases l JOIN up b ON b.id = l.budget_id
     WHERE l.holder = $2 AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
       AND l.expires_at > now()
     ORDER BY b.depth FOR UPDATE OF l),
paid AS (
    UPDATE budget_leases l SET spent = l.spent + 1 FROM mine, up b, budget_windows w
     WHERE l.holder = $2 AND l.budget_id = b.id AND w.budget_id = l.budget_id AND w.window_start = l.window_start
       AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
       AND l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit
       AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL
       AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL
       AND (b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w
                                       WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start)
                                     < b.token_limit)
    RETURNING l.budget_id, l.window_start, b.depth AS room_depth, b.request_limit AS room_limit,
           b.token_limit AS room_token_limit, w.window_end AS room_reset,
           b.token_limit - w.input_tokens - w.output_tokens AS room_tokens_left,
           CASE WHEN b.request_limit IS NULL THEN NULL
                WHEN w.leased_requests * 10 <= b.request_limit - w.admitted_requests - w.leased_requests
                THEN b.request_limit - w.admitted_requests - w.leased_requests + l.granted - l.spent
                ELSE b.request_limit - w.admitted_requests - 1 - (SELECT coalesce(sum(s.spent), 0) FROM budget_leases s
                      WHERE s.budget_id = w.budget_id AND s.window_start = w.window_start) END AS room_left),
logged AS (
    INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
    SELECT $4, c.id, $5, (SELECT array_agg(id ORDER BY depth) FROM up),
           (SELECT array_agg(p.window_start ORDER BY u.depth) FROM paid p JOIN up u ON u.id = p.budget_id)
      FROM counted c)
SELECT c.*, (SELECT array_agg(id ORDER BY depth) FROM up) AS lease_chain, r.*
  FROM counted c,
       (SELECT array_agg(window_start ORDER BY room_depth) AS lease_window_starts,
               array_agg(room_left ORDER BY room_depth) AS room_requests,
               array_agg(room_tokens_left ORDER BY room_depth) AS room_tokens,
               array_agg(room_limit ORDER BY room_depth) AS room_limits,
               array_agg(room_token_limit ORDER BY room_depth) AS room_token_limits,
               array_agg(room_reset ORDER BY room_depth) AS room_resets
          FROM paid) r
 WHERE CASE WHEN (SELECT count(*) FROM paid) < (SELECT count(*) FROM up)
            THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END;
