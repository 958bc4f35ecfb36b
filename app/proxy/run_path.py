"""A run named in the URL: ``/run/<name>/<rest>`` is ``/<rest>`` with ``x-taskgate-run: <name>``.

Every agent can be pointed at a base URL and given an API key, but few can be told to
send a header. ``taskgate run --key`` starts its agent with ``OPENAI_BASE_URL`` =
``<gateway>/run/<fresh name>/v1`` (``ANTHROPIC_BASE_URL`` = ``<gateway>/run/<name>``), so
each invocation with a budget key is a run of its own (:mod:`app.budgets.keys`); anyone
can do the same by hand. The rules:

- ``<name>`` matches :data:`app.budgets.keys.RUN_NAME_PATTERN` (``A-Za-z0-9._-``, at
  most 128 characters, not starting with ``.``, ``_`` or ``-``) and is spelled without
  percent-escapes; otherwise nothing is rewritten and the path matches no route (404);
- an ``x-taskgate-run`` the client sends itself (not blank) wins: the path's name is then
  dropped and the header kept;
- the rest of the request is untouched (method, query, body, the other headers), so
  ``/run/<name>/v1/...`` is authenticated, admitted and relayed as ``/v1/...``, and
  ``/run/<name>/mcp/<server>`` as ``/mcp/<server>``.

The gateway's outer layer (:class:`app.main.Dispatch`) applies :func:`unprefixed` before
it chooses an app by path, so tracing and both apps see the rewritten request; any other
request costs one ``startswith``.
"""

from __future__ import annotations

import re

from starlette.types import Scope

from app.budgets.keys import RUN_HEADER, RUN_NAME_PATTERN

PREFIX = "/run/"
_NAME = re.compile(RUN_NAME_PATTERN)
_HEADER = RUN_HEADER.encode()


def unprefixed(scope: Scope) -> Scope | None:
    """``scope`` (an HTTP scope whose path starts with :data:`PREFIX`) as the request
    without the prefix, with the run header (a new dict; ``scope`` is not changed);
    ``None`` when the path names no valid run or is spelled differently in ``raw_path``."""
    name, slash, rest = scope["path"][len(PREFIX):].partition("/")
    if not slash or not _NAME.fullmatch(name):
        return None
    head = f"{PREFIX}{name}/".encode()
    raw = scope.get("raw_path")
    if raw is not None and not raw.startswith(head):  # percent-escapes in the name
        return None
    headers = scope["headers"]
    if not any(k.lower() == _HEADER and v.strip() for k, v in headers):
        headers = [*headers, (_HEADER, name.encode())]  # last: wins over a blank one
    out = {**scope, "path": "/" + rest, "headers": headers}
    if raw is not None:
        out["raw_path"] = raw[len(head) - 1:]
    return out

