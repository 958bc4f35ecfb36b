"""Short, redacted previews of tool-call arguments for the ledger (off by default).

With ``TASKGATE_LEDGER_ARGUMENT_PREVIEW=N`` the ledger keeps, beside each call's argument
hash, the first ``N`` characters of its canonical arguments (what the hash covers:
:func:`app.guard.fingerprint.canonical_json`, or the raw text when it is not JSON) with
secrets masked as ``***`` first: the value of any object key that names a secret
(:data:`SECRET_KEY`: password, token, secret, api key, authorization, cookie, credential,
private key, ...) and any substring that looks like a credential (:data:`SECRET_TEXT`:
``sk-...`` / ``ghp_...`` / ``xox?-...`` / ``AKIA...`` keys, ``Bearer ...`` values, JWTs).
Pure functions.
"""

from __future__ import annotations

import json
from typing import Any

from app.guard.fingerprint import canonical_json
from app.guard.linear_regex import compile_linear

MASK = "***"
#: Object keys whose values are never shown (matched anywhere in the key, any case).
SECRET_KEY = compile_linear(r"pass(word|wd|phrase)?|secret|token|api[-_ ]?key|auth|cookie|credential|"
                            r"private[-_ ]?key|session|signature", ignorecase=True)
#: Credential-looking text, masked wherever it appears.
SECRET_TEXT = compile_linear(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"            # OpenAI / Stripe style keys
    r"|\bsk-ant-[A-Za-z0-9_-]{16,}"                  # Anthropic
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"                 # GitHub tokens
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"               # Slack
    r"|\bAKIA[0-9A-Z]{16}\b"                         # AWS access key id
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{12,}")


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (MASK if SECRET_KEY.search(str(k)) else _masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str):
        return SECRET_TEXT.sub(MASK, value)
    return value


def argument_preview(arguments: Any, chars: int) -> str | None:
    """The first ``chars`` characters of the canonical, secret-masked arguments (``…``
    marks a cut); ``None`` when ``chars`` is 0."""
    if chars <= 0:
        return None
    value: Any = arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # nested deeper than json.loads goes: the raw text, as the hash
            text = SECRET_TEXT.sub(MASK, arguments)
            return text if len(text) <= chars else text[:chars] + "…"
    try:
        text = canonical_json(_masked(value))
    except (TypeError, ValueError, RecursionError):
        return None
    text = SECRET_TEXT.sub(MASK, text)
    return text if len(text) <= chars else text[:chars] + "…"
