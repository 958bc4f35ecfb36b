"""What the proxy asks admission for, as one value: :class:`AdmissionRequest`.

Built once per request at the edge (:mod:`app.proxy.routes`) and passed down unchanged
through :func:`app.admission.admission.admit_request`, its attempts and its paths; the
result is an :class:`app.admission.outcomes.Admission` (or a refusal raised). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.admission.charge import Charge
from app.guard.judge import GuardRequest


def _unpriced() -> Charge:
    return Charge(None)


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """One more request of one task, as admission needs it.

    - ``token_hash``: SHA-256 hex of the task token (:func:`app.admission.tokens.token_hash`);
      for a budget key's run, the key's (the task is then ``task_id``).
    - ``task_id``: the run task of a budget key (:mod:`app.budgets.runs`), else ``None``.
    - ``guard``: the tool calls and results the loop guard judges (an agent turn), else ``None``.
    - ``charge``: the endpoint, the model and what the request may cost (its input and output
      token bounds, its dollars: :class:`app.admission.charge.Charge`); ``Charge(None)``:
      unpriced, no model (a task with ``allowed_models`` or a dollar ceiling refuses it).
    - ``conversation_key``: the conversation (per-conversation ceilings, the input anchor);
      an agent turn's is its ``guard``'s.
    - ``request_id``: goes into the events the admission records (a latch, a warning).
    """

    token_hash: str
    task_id: str | None = None
    guard: GuardRequest | None = None
    charge: Charge = field(default_factory=_unpriced)
    conversation_key: str = ""
    request_id: str | None = None

    @property
    def who(self) -> str:
        """The task as the process-local caches key it: its id for a run, else the token hash."""
        return self.task_id or self.token_hash

    @property
    def conversation(self) -> str:
        """The conversation its ceilings and anchor count: the agent turn's, else ``conversation_key``."""
        return self.guard.conversation_key if self.guard is not None else self.conversation_key
