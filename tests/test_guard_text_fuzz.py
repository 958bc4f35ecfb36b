"""The loop guard's text paths on hostile text: every read of agent-written text stays
linear whatever the text holds (issue 41: a backtracking fence pattern took 274 s on an
8 KB turn, the seed's ``Action`` pattern 7 s on 60 KB, and the event loop with them).

Each input runs through every path that reads agent-written text on a request: the
conversation key (:func:`app.guard.request_text.conversation_key_of`, scratchpad cut
included), the text-action conventions on an assistant turn and on a scratchpad, the
observation parser, id masking and the argument preview. The bound per input is generous
(:data:`BUDGET_S` for about 100 K characters, thousands of times what RE2 takes); a
quadratic pattern takes tens of seconds on these inputs, a cubic one never ends.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.guard import text_actions, text_conventions
from app.guard.preview import argument_preview
from app.guard.request_text import SEED_CHARS, conversation_key_of
from app.guard.text_turns import Turn

#: Seconds one input may take through every path (RE2: a few milliseconds).
BUDGET_S = 2.0
#: Characters of filler in the adversarial inputs.
FILL = 100_000

KEYWORDS = ("Action", "Action:", "Action 1", "Action Input", "Observation", "Thought", "Final Answer",
            "Action:\n```", "```", "```json", "<code>", "Calling tools:\n", "Calling tools:\n[",
            "call_", "Call id: ", "Bearer ", "sk-", "eyJ", "Search[")
FILLERS = (" ", "\t", "`", "7", "\n", " \t1", "a", ": ", "[", "{")


def _all_paths(text: str) -> None:
    """Every request-path read of agent-written text, on ``text``."""
    asyncio.run(conversation_key_of(None, text, True))
    turns = [Turn(0, "user", "Question?"), Turn(1, "assistant", text), Turn(2, "user", "Observation: " + text)]
    text_actions.extract(turns, "s:key")
    text_actions.extract([Turn(0, "assistant", text), Turn(1, "user", "ok"), Turn(2, "assistant", text),
                          Turn(3, "user", "ok")], "s:key")  # the repeated-pair fall-back
    text_actions.extract([Turn(0, "user", text)], "s:key")  # a scratchpad in one user turn
    text_actions.observation_of(text)
    text_actions.mask_volatile(text)
    argument_preview(text, 200)


def _timed(text: str) -> float:
    start = time.perf_counter()
    _all_paths(text)
    return time.perf_counter() - start


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_a_keyword_then_a_long_run_of_one_filler_is_linear(keyword: str) -> None:
    for filler in FILLERS:
        text = keyword + filler * (FILL // len(filler)) + "x"
        assert _timed(text) < BUDGET_S, (keyword, filler)


@pytest.mark.parametrize("filler", FILLERS)
def test_keywords_repeated_between_runs_are_linear(filler: str) -> None:
    for keyword in KEYWORDS:
        unit = keyword + filler * 40
        assert _timed(unit * (FILL // len(unit))) < BUDGET_S, (keyword, filler)


def test_the_reported_requests_are_fast() -> None:
    assert _timed("Action:\n```" + " " * 8_000 + "x") < BUDGET_S
    assert _timed("Action" + " " * 60_000) < BUDGET_S
    assert _timed("Action" + " " * 120_000) < BUDGET_S


_TOKENS = st.sampled_from(KEYWORDS + FILLERS + (":", "\n", "Input", "Error:\n", "]", "}", "</code>", "'id': '"))


@st.composite
def hostile_texts(draw: st.DrawFn) -> str:
    """Keywords and fillers, each repeated up to a few thousand times: up to ~200 K characters."""
    pieces = draw(st.lists(st.tuples(_TOKENS, st.integers(1, 4_000)), min_size=1, max_size=12))
    return "".join(token * count for token, count in pieces)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_texts())
def test_generated_hostile_texts_stay_within_budget(text: str) -> None:
    assert _timed(text) < BUDGET_S, len(text)


def test_no_text_action_pattern_runs_when_text_actions_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TASKGATE_TEXT_ACTIONS=false``: the conversation key reads the seed without any
    text-action pattern (the scratchpad is not cut)."""

    class Refused:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"a text-action pattern ran ({name})")

    seed = "Question: a?\nThought: t\nAction: read\nAction Input: a\nObservation: x\n"
    cut = asyncio.run(conversation_key_of(None, seed, True))
    for name in ("_ACTION", "_OBSERVATION", "_THOUGHT"):
        monkeypatch.setattr(text_conventions, name, Refused())
    whole = asyncio.run(conversation_key_of(None, seed, False))
    assert whole != cut  # the seed was hashed as it is
    assert whole == asyncio.run(conversation_key_of(None, seed + "", False))


def test_the_seed_is_read_up_to_its_bound() -> None:
    """A seed is keyed by its first SEED_CHARS characters: a prompt growing past them keeps its key."""
    start = "s" * SEED_CHARS
    assert asyncio.run(conversation_key_of(None, start + "a", True)) == asyncio.run(
        conversation_key_of(None, start + "b", True))
    assert asyncio.run(conversation_key_of(None, "a", True)) != asyncio.run(conversation_key_of(None, "b", True))
