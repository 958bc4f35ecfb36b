"""Every regex in ``app/``, read from the source: a pattern run with Python's backtracking
``re`` must be on the allowlist below, with the reason it is linear; everything else is
RE2 (:mod:`app.guard.linear_regex`), linear in the text by construction.

Python's ``re`` backtracks: ``\\A```[\\w-]*\\s*\\n?(.*?)\\n?\\s*```\\Z`` took 274 s on an
8 KB assistant turn, and the gateway's event loop with it (issue 41). A pattern added with
``re`` to a module that reads agent-written text turns this test red until it is moved to
RE2 or justified here.

The calls are found with :mod:`ast` (nothing is imported): ``re.compile``, ``re.search``,
``re.match``, ``re.fullmatch``, ``re.sub``, ``re.subn``, ``re.split``, ``re.findall`` and
``re.finditer``, and ``from re import ...`` (refused outright).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_RE_CALLS = frozenset({"compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer"})

#: (module, pattern source) -> why Python's ``re`` is safe there. A reason names the
#: text the pattern reads and why the match is linear in it: one character class (or a
#: literal) repeated, with no two quantifiers that can share a character; or text that
#: is not the client's (the operator's configuration).
ALLOWED: dict[tuple[str, str], str] = {
    # operator configuration, not client text
    ("app/config/loader.py", r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}"):
        "the operator's config file; literal-led, each class run ends at a literal it excludes",
    ("app/config/schema.py", r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"):
        "the operator's provider names; bounded {0,63}",
    ("app/config/schema.py", r"^https?://[^/\s]+"): "the operator's provider URLs; anchored, one class",
    ("app/config/schema.py", r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"): "the operator's header names; one class",
    ("app/proxy/endpoints.py", r"\{[A-Za-z_][A-Za-z0-9_]*\}"):
        "the operator's endpoint templates; literal-led class run closed by a literal it excludes",
    ("app/proxy/endpoints.py", r"[A-Za-z0-9_.~-]+"):
        "the operator's endpoint templates; one class, fullmatch",
    # client bytes, one class or literal: at most one way to match each character
    ("app/proxy/endpoints.py", r"[A-Za-z0-9\-._~!$&'()*+,;=:@]+"):
        "a request path segment; one class, fullmatch: one pass",
    ("app/proxy/endpoints.py", rb"%(2[fFeE]|5[cC])"):
        "a request path; fixed-length literal",
    ("app/request_ids.py", rb"[A-Za-z0-9._:@/+=-]{1,128}"):
        "a client request id header; one class, bounded, fullmatch",
    ("app/proxy/inbound.py", rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"):
        "a header name; one class, fullmatch",
    ("app/proxy/inbound.py", rb"(?:[\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?"):
        "a header value, anchored at its start (fullmatch): the star backtracks at most once over "
        "the value, so one pass plus one back; values are bounded by the HTTP server",
    ("app/db/bounds.py", "[\x00\ud800-\udfff]"): "one character class",
    ("app/db/bounds.py", "[\ud800-\udfff]"): "one character class",
    ("app/proxy/usage_chunk.py", rb"(\r\n\r\n|\n\n|\r\r)"): "upstream SSE bytes; literals only",
    # upstream events and request bodies, on the hot path (per chunk): each start must match
    # a literal first, and the \s* after it cannot run into the next literal's characters
    ("app/wire/chat_completions.py", r'"(?:content|reasoning_content|reasoning|refusal|text)"\s*:\s*"[^"]'):
        "upstream SSE data; literal-led, the \\s* runs are separated by literals they exclude",
    ("app/wire/chat_completions.py", r'"usage"\s*:\s*\{'): "upstream SSE data; literal-led, as above",
    ("app/wire/chat_completions.py", r'"finish_reason"\s*:\s*"'): "upstream SSE data; literal-led, as above",
    ("app/admission/cost.py",
     rb'"type"\s*:\s*"(?:image|image_url|input_image|input_audio|audio|input_file|file|document)"'):
        "the request body; literal-led, the \\s* runs are separated by literals they exclude",
    ("app/admission/anchor.py",
     rb'"type":"(?:image|image_url|input_image|input_audio|audio|input_file|file|document)"'):
        "the request body; literals only",
    # the start of an answer's line, matched at its start only (match): one start position,
    # and each quantified run is followed by characters it excludes, so no run is re-read
    ("app/guard/repeated_output.py", r"\s*(```|~~~)"): "a line's start; \\s* then a literal it excludes",
    ("app/guard/repeated_output.py",
     r"(?:\s*(?:\||\+[-=+]|#+\s|>|[-*+]\s|\d+[.)]\s)|    |\t|\s*[-=_*+\u2500-\u257f]{3,}\s*$)"):
        "a line's start; each run (\\s*, a class {3,}) is followed by characters it excludes",
    # run names and ids (budget keys, taskgate run, /run/<name>/): one class each, on at most
    # a header's or a path segment's length
    ("app/budgets/keys.py", r"[hs]:[0-9a-f]{32}"): "one class, fixed length",
    ("app/budgets/keys.py", r"[^A-Za-z0-9._]+"): "one class",
    ("app/budgets/keys.py", r"[-._]{2,}"): "one class",
    ("app/cli/run.py", r"[^A-Za-z0-9._-]+"): "the operator's command name; one class",
    ("app/cli/run.py", r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"): "one class after one character, bounded",
    ("app/proxy/run_path.py", r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"): "one class after one character, bounded",
    ("app/guard/repeated_output.py", r"(?<=\n)"): "a zero-width lookbehind of one literal character",
    # an answer's prose cut into words: runs of classes that share no character
    ("app/guard/words.py",
     r"[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]+"
     r"(?:[-+/=]+[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]*)*"
     r"|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]"):
        "an answer's prose; the word-class run and the [-+/=] run are disjoint and each repeat of the group "
        "starts with [-+/=], so every character is taken one way; the other branch is one character",
    ("app/guard/words.py",
     r"(?:[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]|[-+/=])+"):
        "an answer's prose, matched at its start; one group of two disjoint classes repeated: one way a character",
}


def _python_files() -> list[Path]:
    return sorted(p for p in (ROOT / "app").rglob("*.py") if "testing" not in p.parts)


@functools.cache
def _constants() -> dict[str, str | bytes]:
    """Module-level ``NAME = "literal"`` of every module in ``app/`` (a pattern kept in a
    constant, possibly imported from another module, is read through its name)."""
    found: dict[str, str | bytes] = {}
    for path in _python_files():
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (str, bytes)):
                found[node.targets[0].id] = node.value.value
    return found


def _patterns(path: Path) -> list[tuple[int, str | bytes | None]]:
    """(line, pattern) of every ``re.<call>(pattern, ...)`` in ``path`` (``None``: not a
    literal, nor a module-level constant of ``app/``)."""
    constants = _constants()
    found: list[tuple[int, str | bytes | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "re":
            found.append((node.lineno, None))
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in _RE_CALLS):
            continue
        literal = node.args[0] if node.args else None
        try:
            value = ast.literal_eval(literal) if literal is not None else None
        except ValueError:
            value = constants.get(literal.id) if isinstance(literal, ast.Name) else None
        found.append((node.lineno, value if isinstance(value, (str, bytes)) else None))
    return found


def test_every_backtracking_pattern_is_allowlisted_with_its_reason() -> None:
    unexplained = []
    for path in _python_files():
        module = path.relative_to(ROOT).as_posix()
        for line, pattern in _patterns(path):
            if pattern is None or (module, pattern) not in ALLOWED:
                unexplained.append(f"{module}:{line}: {pattern!r}")
    assert not unexplained, (
        "Python re patterns outside the allowlist (use app.guard.linear_regex.compile_linear, "
        "or justify linearity in tests/test_regex_inventory.py):\n" + "\n".join(unexplained))


def test_the_allowlist_names_only_patterns_that_exist() -> None:
    present = {(path.relative_to(ROOT).as_posix(), pattern)
               for path in _python_files() for _, pattern in _patterns(path)}
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)


def test_modules_reading_agent_text_use_no_backtracking_regex() -> None:
    """The modules that read the agent's own text: not even an allowlisted ``re``."""
    for module in ("app/guard/text_actions.py", "app/guard/text_conventions.py", "app/guard/preview.py",
                   "app/guard/normalize.py",
                   "app/guard/fingerprint.py", "app/guard/request_text.py", "app/guard/text_turns.py"):
        assert not _patterns(ROOT / module), module
