"""The loop guard's reading of agent-written text on the request path: bounded, and off
the event loop when large.

Two reads happen on a request before admission, both on text the agent (or whoever holds
its token) wrote:

- the **conversation key** (:func:`conversation_key_of`): without a session header, a hash
  of the request's conversation seed (first instructions + first user message). Only the
  seed's first :data:`SEED_CHARS` characters are read: the key hashes them, and when text
  actions are read (``TASKGATE_TEXT_ACTIONS``, default on) a ReAct scratchpad is cut from
  them (:func:`app.guard.text_conventions.seed_without_scratchpad`). A seed longer than that
  is keyed by its start, which a growing prompt keeps.
- the **text actions** of the history's tail (:func:`text_actions_of`), read only when
  ``TASKGATE_TEXT_ACTIONS`` is on; each convention reads at most the last
  :data:`app.guard.text_actions.SCAN_CHARS` characters of a turn.

Every pattern on that text is RE2 (:mod:`app.guard.linear_regex`: linear time in the
text, whatever it holds), and a read of more than
:data:`app.guard.result_prints.INLINE_BYTES` characters runs in a worker thread (RE2
releases the GIL while it matches), so one large or hostile request costs its own
latency, never another task's.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.guard.fingerprint import conversation_key
from app.guard.result_prints import off_loop_when_large
from app.guard.text_actions import TextAction, extract
from app.guard.text_conventions import seed_without_scratchpad
from app.guard.text_turns import Turn

#: Characters of a conversation seed read (its start): ~256 K, about four times the
#: longest agent system prompt seen in captures plus a first message.
SEED_CHARS = 262_144

async def conversation_key_of(session: str | None, seed: str, text_actions: bool) -> str:
    """The conversation key (:func:`app.guard.fingerprint.conversation_key`, at most 34
    characters) of a request with session header value ``session`` (``None``: none) and
    conversation seed ``seed``. With a session header the seed is not read at all;
    ``text_actions`` off: no text-action pattern runs. Never raises."""
    if session is not None and session.strip():
        return conversation_key(session, "")
    start = seed[:SEED_CHARS]
    if text_actions and "Action" in start:  # the scratchpad's marker: no pattern runs without it
        start = await off_loop_when_large(lambda: seed_without_scratchpad(start), len(start))
    return conversation_key(None, start)


async def text_actions_of(turns: Sequence[Turn], scope: str) -> list[TextAction]:
    """:func:`app.guard.text_actions.extract` of a history's tail (``scope``: the
    conversation key), in a worker thread when the tail's text is large. Never raises."""
    return await off_loop_when_large(lambda: extract(turns, scope), sum(len(t.text) for t in turns))
