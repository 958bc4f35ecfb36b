"""Budget keys, and the task each agent run of a key gets. Pure: no I/O.

A budget key is ``tgk-`` + 32 random URL-safe bytes; only its SHA-256 is stored (like a
task token, :mod:`app.admission.tokens`). An agent uses it as its API key; every **run**
of the agent gets its own task, identified (:func:`run_id`) by, in order:

1. ``x-taskgate-run`` (set by an orchestrator or CI job);
2. the session header the agent sends itself (``x-taskgate-conversation``, then
   ``TASKGATE_SESSION_HEADERS``: ``x-session-id``, Codex's ``session-id``/``session_id``,
   Claude Code's ``x-claude-code-session-id``);
3. else the conversation key the loop guard computes from the first messages.

The run's task id is :func:`run_task_id`: ``<budget>-run-<16 hex of SHA-256(budget, run)>``,
safe in a URL path and a valid task id for any budget id.
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


def run_task_id(budget_id: str, run: str) -> str:
    """The id of the task of ``run`` under ``budget_id``."""
    digest = hashlib.sha256(f"{budget_id}\n{run}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{budget_id}-run-{digest[:16]}"
