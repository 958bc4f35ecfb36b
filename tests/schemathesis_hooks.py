"""schemathesis hooks for the admin API run (``SCHEMATHESIS_HOOKS=tests.schemathesis_hooks``).

``format: python-regex`` (loop-guard result normalisers) is a Python ``re`` pattern; JSON
Schema's own ``regex`` format means ECMA-262, which refuses ``(?i)`` and named groups.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

import schemathesis
from hypothesis import strategies as st

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=30)
PYTHON_REGEX = st.one_of(
    st.sampled_from([r"build #\d+", r"(?i)error: .*", r"\b[0-9a-f]{8}\b", r"(?P<n>\d+) ms", r"^\s+$"]),
    _TEXT.map(re.escape),
)
schemathesis.openapi.format("python-regex", PYTHON_REGEX)


@schemathesis.hook("map_query").apply_to(path="/admin/spend")
def spend_days(ctx: schemathesis.HookContext, query: dict | None) -> dict | None:  # type: ignore[type-arg]
    """``/admin/spend``: ``from`` no later than ``to`` and at most 366 days before it (what
    the schema's two ``format: date`` parameters cannot say); a ``to`` that is not a date is
    left alone (a negative case)."""
    if not isinstance(query, dict) or not isinstance(query.get("from"), str):
        return query
    try:
        first = date.fromisoformat(query["from"])
    except ValueError:
        return query
    if "to" not in query:
        return {**query, "to": first.isoformat()}
    try:
        last = date.fromisoformat(query["to"]) if isinstance(query["to"], str) else None
    except ValueError:
        return query
    if last is not None and not timedelta(0) <= last - first <= timedelta(days=365):
        return {**query, "to": first.isoformat()}
    return query


@schemathesis.hook("map_case").apply_to(path_regex=r"^/admin/budgets(/\{budget_id\})?$")
def distinct_globs(ctx: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """A budget's ``model_limits``: each glob once (what JSON Schema cannot say of a list of
    objects: ``uniqueItems`` compares whole entries). Later entries of a glob already listed
    are dropped; anything that is not such a list is left alone (a negative case). A case
    hook, because the coverage phase applies those (not body hooks)."""
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("model_limits"), list):
        return case
    seen: set[str] = set()
    kept = []
    for entry in body["model_limits"]:
        glob = entry.get("model") if isinstance(entry, dict) else None
        if isinstance(glob, str) and glob in seen:
            continue
        if isinstance(glob, str):
            seen.add(glob)
        kept.append(entry)
    case.body = {**body, "model_limits": kept}
    return case
