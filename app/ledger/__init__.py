"""The loop guard's storage: what the guard's pure verdicts (:mod:`app.guard`) read and
write in PostgreSQL, on the floor above them (issue 35).

- :mod:`app.ledger.tool_calls`: a request's tool calls and results into the ledger,
  judged inside admission (:func:`~app.ledger.tool_calls.record_request`);
- :mod:`app.ledger.rows`: the ledger's rows as the statements take and give them (pure);
- :mod:`app.ledger.known_windows`: conversations' windows as this process last saw
  them, and the window a turn will leave (a cache, checked under the row lock);
- :mod:`app.ledger.conversations`: per-conversation counters;
- :mod:`app.ledger.strikes`: strikes and gateway notes.

A response's record after the exchange is the settlement's (:mod:`app.settlement`).
"""
