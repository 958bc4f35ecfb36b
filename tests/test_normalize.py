"""Result normalisation (app/guard/normalize.py): example tables for each default rule,
operator patterns, and hypothesis properties that progress is never hidden."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.guard.linear_regex import UnsafePattern
from app.guard.normalize import DEFAULT, DEFAULT_RULES, IDENTITY, Normalizer, build, check_patterns


def codex_envelope(output: str, *, chunk: str = "95330b", wall: str = "1.0764", code: int = 0,
                   tokens: int = 51) -> str:
    """A shell result in the shape Codex CLI sends (see the captures): envelope, then output."""
    return (f"Chunk ID: {chunk}\nWall time: {wall} seconds\nProcess exited with code {code}\n"
            f"Original token count: {tokens}\nOutput:\n{output}")


def claude_code_read(content: str, tokens_left: int) -> str:
    """A Read result in the shape Claude Code (2.x) sends: the file's lines, then its
    context reminder, whose number changes on every call."""
    return (f"{content}\n<system-reminder>\n<total_tokens>{tokens_left} tokens left</total_tokens>\n"
            "</system-reminder>")


LISTING = "total 8\n-rw-r--r-- 1 me me 51 Dec  1 06:54 notes.txt\n-rw-r--r-- 1 me me 15 Dec  1 06:54 app.py\n"

# (input, normalised) per default rule
EXAMPLES = [
    (codex_envelope(LISTING), "Process exited with code 0\nOutput:\n" + LISTING),
    (codex_envelope("", code=2), "Process exited with code 2\nOutput:\n"),
    ("Process running with session ID 41\n", "Process running with session ID <id>\n"),
    ("Output: total 12\nError: (none)\nExit Code: 0\nSignal: 0\nProcess Group PGID: 14705",
     "Output: total 12\nError: (none)\nExit Code: 0\nSignal: 0\nProcess Group PGID: <pid>"),
    ("Background PIDs: 812, 813\n", "Background PIDs: <pid>\n"),
    ("job 3f0c8a52-1b7e-4c1d-9a3e-0d6f2b4c8e11 queued", "job <uuid> queued"),
    ("at 2026-12-01T06:54:12.345Z ok", "at <timestamp> ok"),
    ("at 2026-12-01 06:54:12+01:00 ok", "at <timestamp> ok"),
    ("released 2026-12-01", "released 2026-12-01"),
    ('127.0.0.1 - - [01/Dec/2026:06:54:12 +0000] "GET / HTTP/1.1" 200',
     '127.0.0.1 - - <timestamp> "GET / HTTP/1.1" 200'),
    ("Dec  1 06:54:12 host sshd[812]: ok", "<timestamp> host sshd[812]: ok"),
    ("06:54:12.120 INFO ready", "<time> INFO ready"),
    ("-rw-r--r-- 1 me me 15 Dec  1 06:54 app.py", "-rw-r--r-- 1 me me 15 Dec  1 06:54 app.py"),
    ("request id 9f86d081884c7d659a2feaa0c55ad015", "request id <hex>"),
    ("commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39", "commit <hex>"),
    ("short sha 3f2a9c1", "short sha 3f2a9c1"),
    ("account 1234567890123456", "account 1234567890123456"),
    ("===== 3 passed in 0.12s =====", "===== 3 passed in <elapsed> ====="),
    ("build took 1.23s", "build took <elapsed>"),
    ("Done in 45ms", "Done in <elapsed>"),
    ("elapsed 0.0012 seconds", "elapsed <elapsed>"),
    ("retrying in 2 minutes", "retrying in <elapsed>"),
    ("42 lines, 3 files, exit code 1", "42 lines, 3 files, exit code 1"),
    (claude_code_read("1\thello\n2\n", 14894599), "1\thello\n2"),
]


@pytest.mark.parametrize(("raw", "expected"), EXAMPLES)
def test_default_rules_examples(raw: str, expected: str) -> None:
    assert DEFAULT(raw) == expected


def test_codex_results_differing_only_in_the_envelope_normalise_equal() -> None:
    a = codex_envelope(LISTING, chunk="95330b", wall="1.0764")
    b = codex_envelope(LISTING, chunk="cecc33", wall="0.0000")
    assert a != b and DEFAULT(a) == DEFAULT(b)


def test_claude_code_results_differing_only_in_the_reminder_normalise_equal() -> None:
    a, b = claude_code_read("1\thello\n", 14894599), claude_code_read("1\thello\n", 14894505)
    assert a != b and DEFAULT(a) == DEFAULT(b)
    assert DEFAULT(claude_code_read("1\thello\n", 1)) != DEFAULT(claude_code_read("1\thello!\n", 1))


@pytest.mark.parametrize("rule", DEFAULT_RULES, ids=lambda r: r.name)
def test_every_default_rule_is_needed(rule) -> None:
    """Without this rule at least one example normalises differently."""
    without = Normalizer(tuple(r for r in DEFAULT_RULES if r is not rule))
    assert any(without(raw) != expected for raw, expected in EXAMPLES)


def test_operator_patterns_are_masked_after_the_defaults() -> None:
    n = build(True, (r"build #\d+",))
    assert n("build #41 took 3s") == "<masked> took <elapsed>"
    assert n.names[-1] == "operator:1"


def test_defaults_can_be_turned_off() -> None:
    raw = codex_envelope(LISTING)
    assert build(False, ())(raw) == raw
    assert build(False, ()) == IDENTITY
    assert build(False, (r"^Chunk ID: \w+\n",))(raw).startswith("<masked>Wall time")


def test_bad_operator_pattern_is_refused_with_its_position() -> None:
    with pytest.raises(ValueError, match="pattern 2"):
        check_patterns(["ok", "(unclosed"])
    with pytest.raises(UnsafePattern):
        build(True, ("(unclosed",))


@pytest.mark.parametrize("pattern", [r"(?=a)b", r"(a)\1", r"(?<=x)y", "a{1000}{1000}"])
def test_patterns_re2_cannot_run_in_linear_time_are_refused(pattern) -> None:
    with pytest.raises(ValueError, match="linear time"):
        check_patterns([pattern])


def test_catastrophic_backtracking_pattern_is_harmless() -> None:
    """``(a+)+$`` compiles (RE2 has no backtracking) and masks what it should; the
    text that took Python's engine seconds per character is one linear pass."""
    normalizer = build(False, (r"(a+)+$",))
    assert normalizer("a" * 26 + "!") == "a" * 26 + "!"
    assert normalizer("b" + "a" * 100_000) == "b<masked>"
    assert normalizer("a" * 1_000_000 + "!") == "a" * 1_000_000 + "!"


# ---------------------------------------------------------------- properties

# Words without digits, hex-only runs or time units: text that no default rule touches.
WORD = st.text(alphabet="ghijklnopqrtvwxyzGHIJKLNOPQRTVWXYZ_.,;()/", min_size=1, max_size=8)
LINE = st.lists(WORD, min_size=1, max_size=6).map(" ".join)
LINES = st.lists(LINE, min_size=1, max_size=8)
CHUNK_ID = st.text(alphabet="0123456789abcdef", min_size=6, max_size=6)
WALL = st.floats(min_value=0, max_value=1000, allow_nan=False).map(lambda f: f"{f:.4f}")
SECONDS = st.floats(min_value=0, max_value=1000, allow_nan=False).map(lambda f: f"{f:.2f}s")


def envelope(output: str, chunk: str, wall: str, code: int = 0) -> str:
    return codex_envelope(output, chunk=chunk, wall=wall, code=code, tokens=len(output) // 4)


@settings(max_examples=200, deadline=None)
@given(LINES, st.integers(0, 7), LINE, CHUNK_ID, CHUNK_ID, WALL, WALL)
def test_changed_file_contents_stay_different(lines, at, new_line, c1, c2, w1, w2) -> None:
    changed = list(lines)
    changed[at % len(lines)] = new_line
    a, b = "\n".join(lines), "\n".join(changed)
    if a != b:
        assert DEFAULT(envelope(a, c1, w1)) != DEFAULT(envelope(b, c2, w2))
    else:
        assert DEFAULT(envelope(a, c1, w1)) == DEFAULT(envelope(b, c2, w2))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000), SECONDS, SECONDS)
def test_pass_counts_stay_different_and_timings_do_not_matter(n, m, t1, t2) -> None:
    a, b = f"===== {n} passed in {t1} =====", f"===== {m} passed in {t2} ====="
    assert (DEFAULT(a) == DEFAULT(b)) == (n == m)


@settings(max_examples=200, deadline=None)
@given(LINE, st.integers(1, 50), st.integers(1, 50), CHUNK_ID, CHUNK_ID, WALL, WALL)
def test_line_counts_stay_different(line, n, m, c1, c2, w1, w2) -> None:
    a = envelope("\n".join([line] * n), c1, w1)
    b = envelope("\n".join([line] * m), c2, w2)
    assert (DEFAULT(a) == DEFAULT(b)) == (n == m)


@settings(max_examples=200, deadline=None)
@given(LINES, st.integers(0, 255), st.integers(0, 255), CHUNK_ID, CHUNK_ID, WALL, WALL)
def test_exit_codes_stay_different(lines, x, y, c1, c2, w1, w2) -> None:
    out = "\n".join(lines)
    assert (DEFAULT(envelope(out, c1, w1, x)) == DEFAULT(envelope(out, c2, w2, y))) == (x == y)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_normalising_is_total_and_idempotent(text) -> None:
    once = DEFAULT(text)
    assert DEFAULT(once) == once


# ---------------------------------------------------------------- the one-pass check

def rule_by_rule(normalizer: Normalizer, text: str) -> str:
    """What a normaliser gives without its one-pass check: every rule, in order."""
    for rule in normalizer.rules:
        text = rule.apply(text)
    return text


FRAGMENTS = st.sampled_from([
    "ok", "\n", " ", "Chunk ID: 95330b\n", "Wall time: 1.07 seconds\n", "Process running with session ID 7",
    "Process Group PGID: 14705", "3f0c8a52-1b7e-4c1d-9a3e-0d6f2b4c8e11", "2026-12-01T06:54:12Z", "06:54:12",
    "[01/Dec/2026:06:54:12 +0000]", "9f86d081884c", "7d659a2f", "eaa0c55ad015", "took 3s", "<system-reminder>",
    "</system-reminder>", "<system-reminder>x</system-reminder>", "build #41", "BUILD #7"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=6)), max_size=12).map("".join))
def test_the_one_pass_check_never_changes_a_result(text) -> None:
    """Checking all rules at once first gives what running each rule gives, with the
    defaults and with an operator's pattern that carries its own flag."""
    for normalizer in (DEFAULT, build(True, (r"(?i)build #\d+",)), build(False, (r"^ok$",))):
        assert normalizer(text) == rule_by_rule(normalizer, text)


def test_each_rule_keeps_its_flags_in_the_one_pass_check() -> None:
    """A line-anchored rule found only mid-text (multi-line) and an operator's
    case-insensitive pattern: the combined check must find both."""
    assert DEFAULT.any_rule is not None
    assert DEFAULT("log\nChunk ID: zz\nok") == "log\nok"
    assert build(False, (r"(?i)build #\d+",))("see BUILD #7") == "see <masked>"


def test_a_match_made_by_an_earlier_rule_is_still_masked() -> None:
    """The hex run exists only once the reminder inside it is removed: the check sees
    the reminder, so the rules run one by one and the later rule masks the joined run."""
    assert DEFAULT("id 9f86d081<system-reminder>x</system-reminder>884c7d659a2f") == "id <hex>"


def test_rules_too_large_to_combine_run_one_by_one(monkeypatch) -> None:
    """When RE2 refuses the combined pattern (over its memory budget), the normaliser
    checks nothing first and runs every rule."""
    monkeypatch.setattr("app.guard.normalize.any_of", lambda patterns: None)
    uncombined = Normalizer(DEFAULT_RULES)
    assert uncombined.any_rule is None
    assert all(uncombined(raw) == expected for raw, expected in EXAMPLES)
