-- Settlements of many admissions in one statement (app.db.settlements, issue 39): the
-- round's arrays into taskgate_settle_usage_batch (app/db/sql/functions/), which says what
-- it writes, in which order it locks, and why it is a function.

-- name: settle_usage_batch
-- $1 admission keys (uuid[]), $2 task ids, $3 input and $4 output tokens, $5 dollars
-- settled, $6 dollars released from hold $7 (bigint[], NULL: none), $8 models. One row per
-- input row, in order: n (1-based), locked, first.
SELECT n, locked, first FROM taskgate_settle_usage_batch($1, $2, $3, $4, $5, $6, $7, $8);
