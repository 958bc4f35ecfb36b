"""Fleet budgets: ceilings over many tasks (issue 24).

- :mod:`app.budgets.windows`: calendar windows in a timezone (pure);
- :mod:`app.budgets.rules`: what a budget window admits, and the refusals (pure);
- :mod:`app.budgets.ledger`: reserving against a task's budget chain inside its
  admission transaction, and settling afterwards (PostgreSQL);
- :mod:`app.budgets.keys`: budget keys and the task each agent run gets (pure);
- :mod:`app.budgets.runs`: resolving a budget key and creating a run's task (PostgreSQL);
- :mod:`app.budgets.model_limits`: dollars and tokens per model glob, per window;
- :mod:`app.budgets.rates`: requests and tokens per minute, 429 ``rate_limited``.
"""
