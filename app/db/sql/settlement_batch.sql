-- Settlements of many admissions in one statement (app.db.settlements, issue 39): the
-- round's arrays into taskgate_settle_batch (app/db/sql/functions/), which says what
-- it writes, in which order it locks, and why it is a function.

-- name: settle_batch
-- $1 admission keys (uuid[]), $2 task ids, $3 input and $4 output tokens, $5 dollars
-- settled, $6 dollars released from hold $7 (bigint[], NULL: none), $8 models; a judged
-- answer's $9 conversation key (NULL: none), $10 text hash, $11 whether it repeats. One row
-- per input row, in order: n (1-based), locked, first, and for an answer written now
-- status, loop_guard and answer_streak (else NULL).
SELECT n, locked, first, status, loop_guard, answer_streak
  FROM taskgate_settle_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);
