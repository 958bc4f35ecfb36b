"""The durable spend record: one ``spend_daily`` row per task, model and UTC day
(migration 0020), what ``GET /admin/spend`` exports.

A request's tokens and dollars reach it in the statement that settles them on the task
(:mod:`app.settlement.response`): the ``spent`` common table expression that each such
statement of ``app/db/sql/ledger.sql`` carries, after its locked task row (only that
task's settlements write its rows, and they already wait on its lock: no new hot row).
The same statement counts the request (``requests`` + 1): every admitted request is
settled once (:func:`app.db.commits.settling`), also one that upstream answered without
usage. The day is the settlement's, in UTC. Rows are never pruned.
"""
