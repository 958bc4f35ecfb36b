"""schemathesis hooks for the admin API run (``SCHEMATHESIS_HOOKS=tests.schemathesis_hooks``).

``format: python-regex`` (loop-guard result normalisers) is a Python ``re`` pattern; JSON
Schema's own ``regex`` format means ECMA-262, which refuses ``(?i)`` and named groups.
"""

from __future__ import annotations

import re

import schemathesis
from hypothesis import strategies as st

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=30)
PYTHON_REGEX = st.one_of(
    st.sampled_from([r"build #\d+", r"(?i)error: .*", r"\b[0-9a-f]{8}\b", r"(?P<n>\d+) ms", r"^\s+$"]),
    _TEXT.map(re.escape),
)
schemathesis.openapi.format("python-regex", PYTHON_REGEX)
