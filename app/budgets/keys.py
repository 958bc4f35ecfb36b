"""Budget keys, and the task each agent run of a key gets. Pure: no I/O.

A budget key is ``tgk-`` + 32 random URL-safe bytes; only its SHA-256 is stored (like a
task token, :mod:`app.admission.tokens`). An agent uses it as its API key; every **run**
of the agent gets its own task, identified (:func:`run_id`) by, in order:

1. ``x-taskgate-run`` (set by an orchestrator or CI job);
2. the session header the agent sends itself (``x-taskgate-conversation``, then
   ``TASKGATE_SESSION_HEADERS``: ``x-session-id``, Codex's ``session-id``/``session_id``,
   Claude Code's ``x-claude-code-session-id``);
3. else the conversation key the loop guard computes from the first messages.

The run's task id is :func:`run_task_id`: ``<budget>-run-<16 hex of SHA-256(budget, key
id, run)>``, safe in a URL path and a valid task id for any budget id. The key's id is in
the digest, so a run belongs to the key that opened it: two keys of one budget naming the
same run get two tasks, and a key can only ever name tasks derived from its own id (the
gateway admits a budget key's request only on the id derived here; a task token is never
handed out). Tasks opened before the key was in the digest have
:func:`legacy_run_task_id`; :mod:`app.budgets.runs` continues one only through the key
its metadata names.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence

KEY_PREFIX = "tgk-"
#: The header an orchestrator names a run with.
RUN_HEADER = "x-taskgate-run"
#: Wins over the agent's session headers, as for the loop guard's conversation key.
CONVERSATION_HEADER = "x-taskgate-conversation"


def new_key() -> str:
    """A fresh budget key (shown once, at creation)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def is_budget_key(token: str) -> bool:
    return token.startswith(KEY_PREFIX)


def run_id(headers: Mapping[str, str], session_headers: Sequence[str], conversation_key: str) -> str:
    """Which run a request of a budget key belongs to (the order of the module
    docstring); ``headers`` have lower-case names. ``"default"`` when nothing names one."""
    for name in (RUN_HEADER, CONVERSATION_HEADER, *session_headers):
        value = headers.get(name, "").strip()
        if value:
            return value
    return conversation_key or "default"


def run_task_id(budget_id: str, key_id: str, run: str) -> str:
    """The id of the task of ``run`` opened by the key ``key_id`` of ``budget_id``:
    deterministic (every replica and retry finds the same task) and distinct per key.
    Neither id can hold a newline (their patterns), so the digested text is unambiguous."""
    return _derived(budget_id, f"{budget_id}\n{key_id}\n{run}")


def legacy_run_task_id(budget_id: str, run: str) -> str:
    """The id a run's task had before the key was part of it (migration-free: such tasks
    keep their ids and are continued by the key that opened them, nothing else)."""
    return _derived(budget_id, f"{budget_id}\n{run}")


def _derived(budget_id: str, text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{budget_id}-run-{digest[:16]}"
