"""After the exchange: one home for what a relayed request settles, on its own floor
above budgets and admission (issue 35).

- :mod:`app.settlement.exchange`: the one entry (:func:`~app.settlement.exchange.settle`):
  the budget windows, then the task's record, once per admission;
- :mod:`app.settlement.response`: the response on its task: usage and dollars (into its
  one budget window and the spend record in the same statement), tool calls into the
  ledger, the loop guard's stop latched.
"""
