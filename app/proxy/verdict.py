"""A verdict before the last byte (issue 34 item 3): what the relay asks before it
releases the end of an answer the loop guard will judge.

An answer the guard judges (one that repeated itself, ``repeated_output``; a text
answer that may be the same answer again, ``repeated_response``; one with tool calls,
whose ceilings are checked) has its decision written durably -- its usage and tool
calls, a latch or a strike -- *before* the client gets its last byte:

- a body (already whole in memory) is judged before any of it is sent;
- a stream's chunk holding the terminal event is held until the verdict on what
  preceded it; a stream the gateway cuts (``repeated_output``) gets its terminal error
  only after the verdict.

So the agent's next request, however soon it comes, meets the decision. A plain answer
(no tool calls, not repeating, the first of its conversation) is not held:
:meth:`VerdictHook.wants_verdict` is a pure check on what the relay already parsed.

The hook is :class:`app.proxy.accounting.Accounting`; a :class:`Ruling` tells the relay
what becomes of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.proxy.outcome import Outcome

#: The status a withheld (struck) body is answered with: upstream's answer was
#: degenerate and the gateway did not deliver it. Clients retry a 502 (the OpenAI and
#: Anthropic SDKs do, twice by default), and the retry carries the gateway's note.
WITHHELD_STATUS = 502


@dataclass(frozen=True, slots=True)
class Ruling:
    """The answer is struck (:mod:`app.guard.strike_rules`): a body is withheld and
    answered with :data:`WITHHELD_STATUS`, a stream ends with its format's terminal
    error instead of its own end; ``code`` is the rule, ``message`` the sentence the
    client reads. (An answer that is released as it is gets no ruling: ``None``.)"""

    code: str
    message: str


class VerdictHook(Protocol):
    """What the relay asks before the last byte of a guarded answer."""

    #: Whether a stream that repeats itself is cut (its ``repeated_output`` action is
    #: not ``warn``).
    cuts_repeating: bool

    def wants_verdict(self, outcome: Outcome) -> bool:
        """Whether the answer so far (``outcome.summary``, ``outcome.detail``) is one the
        guard judges; pure and cheap."""

    async def verdict(self, outcome: Outcome) -> Ruling | None:
        """Judge the answer and write the decision; ``None``: release it as it is.
        Never raises (a failure is logged and the answer released)."""
