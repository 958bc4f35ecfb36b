"""Budget keys, and the task each agent run of a key gets. Pure: no I/O.

A budget key is ``tgk-`` + 32 random URL-safe bytes; only its SHA-256 is stored (like a
task token, :mod:`app.admission.tokens`). An agent uses it as its API key; every **run**
of the agent gets its own task, identified (:func:`run_id`) by, in order:

1. ``x-taskgate-run`` (set by an orchestrator or CI job);
2. the session header the agent sends itself (``x-taskgate-conversation``, then
   ``TASKGATE_SESSION_HEADERS``: ``x-session-id``, Codex's ``session-id``/``session_id``,
   Claude Code's ``x-claude-code-session-id``);
3. else the conversation key the loop guard computes from the first messages.

The run's task id is :func:`run_task_id`: ``<budget>-run-<name>-<16 hex of SHA-256(budget,
key id, run)>``, where ``<name>`` is the run's own name made safe (:func:`run_label`: at
most :data:`RUN_LABEL_CHARS` of ``A-Za-z0-9._-``), so a task names its run
(``team-a-run-codex-20261204T104608Z-3f2a-1a2b3c4d5e6f7a8b``). A run grouped by its first
messages has no name: its id is ``<budget>-run-<16 hex>``. Ids are safe in a URL path and
valid task ids for any budget id (at most 126 characters). The digest is over the whole
run, so two runs whose names read alike after shortening still get two tasks. The key's
id is in the digest, so a run belongs to the key that opened it: two keys of one budget
naming the same run get two tasks, and a key can only ever name tasks derived from its
own id (the gateway admits a budget key's request only on the id derived here; a task
token is never handed out).

Tasks opened before keep their ids (:func:`earlier_run_task_ids`: without the name, and
before the key was in the digest, :func:`legacy_run_task_id`); :mod:`app.budgets.runs`
continues one only through the key its metadata names.

A run can also be named in the URL: ``/run/<name>/v1/...`` is ``/v1/...`` with
``x-taskgate-run: <name>`` (:mod:`app.proxy.run_path`; what ``taskgate run --key`` does).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import unicodedata
from collections.abc import Mapping, Sequence

KEY_PREFIX = "tgk-"
#: The header an orchestrator names a run with.
RUN_HEADER = "x-taskgate-run"
#: Wins over the agent's session headers, as for the loop guard's conversation key.
CONVERSATION_HEADER = "x-taskgate-conversation"
#: Longest name part of a run task's id, in characters: with the longest budget id (64)
#: the id is 64 + 5 (``-run-``) + 40 + 1 + 16 = 126 characters, within a task id's 128.
RUN_LABEL_CHARS = 40
#: A run name in a URL path (``/run/<name>/``) or given to ``taskgate run --run``: URL-safe
#: as is, and no longer than a task id.
RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
#: The loop guard's conversation keys (:func:`app.guard.fingerprint.conversation_key`): a
#: run grouped by its first messages, which has no name to show.
_CONVERSATION_KEY = re.compile(r"[hs]:[0-9a-f]{32}")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._]+")
_SEPARATORS = re.compile(r"[-._]{2,}")


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


def run_label(run: str) -> str:
    """The name part of ``run``'s task id: ``run`` in ASCII (accents dropped), every stretch
    of other characters, or of two or more of ``-._``, one ``-``, without ``-``, ``.`` or
    ``_`` at either end, at most :data:`RUN_LABEL_CHARS` characters; ``""`` for a
    conversation key or when nothing is left (``"Fix bug #7 ..."`` -> ``"Fix-bug-7"``). Pure."""
    if _CONVERSATION_KEY.fullmatch(run):
        return ""
    ascii_run = unicodedata.normalize("NFKD", run).encode("ascii", "ignore").decode("ascii")
    label = _SEPARATORS.sub("-", _NOT_LABEL.sub("-", ascii_run)).strip("-._")
    return label[:RUN_LABEL_CHARS].rstrip("-._")


def run_task_id(budget_id: str, key_id: str, run: str) -> str:
    """The id of the task of ``run`` opened by the key ``key_id`` of ``budget_id``:
    ``<budget>-run-<name>-<16 hex>`` (``<budget>-run-<16 hex>`` when :func:`run_label` is
    empty), at most 126 characters of ``A-Za-z0-9._-``. Deterministic (every replica and
    retry finds the same task) and distinct per key. Neither id can hold a newline (their
    patterns), so the digested text is unambiguous."""
    digest = _digest(budget_id, key_id, run)
    label = run_label(run)
    return f"{budget_id}-run-{label}-{digest}" if label else f"{budget_id}-run-{digest}"


def earlier_run_task_ids(budget_id: str, key_id: str, run: str) -> tuple[str, ...]:
    """The ids ``run``'s task of ``key_id`` had before :func:`run_task_id`, newest first:
    the same digest without the name (when the run has one), then
    :func:`legacy_run_task_id`. A run's task opened under one of them keeps it."""
    unnamed = f"{budget_id}-run-{_digest(budget_id, key_id, run)}"
    legacy = legacy_run_task_id(budget_id, run)
    return (legacy,) if unnamed == run_task_id(budget_id, key_id, run) else (unnamed, legacy)


def legacy_run_task_id(budget_id: str, run: str) -> str:
    """The id a run's task had before the key was part of it (migration-free: such tasks
    keep their ids and are continued by the key that opened them, nothing else)."""
    return f"{budget_id}-run-{_digest(budget_id, run)}"


def _digest(*parts: str) -> str:
    """16 hex of SHA-256 of ``parts`` joined by newlines (lone surrogates encoded as they are)."""
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]
