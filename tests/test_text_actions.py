"""Text actions (app/guard/text_actions.py, app/guard/text_turns.py): tables of request
shapes in each text convention (built from the conventions' formats, not copied from any
client), what the extractor reads from them, and that it leaves structured turns alone."""

from __future__ import annotations

import pytest

from app.guard.text_actions import extract, guard_calls, mask_volatile, observation_of
from app.guard.text_conventions import seed_without_scratchpad
from app.guard.text_turns import TAIL_ASSISTANT_TURNS, Turn, latest_answer_sha256, tail

KEY = "s:0123456789abcdef0123456789abcdef"


def parts(text: str) -> list[dict]:
    return [{"type": "text", "text": text}]


def smol_call(call_id: str, name: str, arguments: object) -> str:
    """An assistant turn in smolagents' shape: optional thought, then the repr'd call list."""
    listing = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]
    return "Calling tools:\n" + str(listing)


def body(*messages: tuple[str, object]) -> dict:
    return {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages]}


def actions_of(payload: dict, scope: str = KEY):
    return extract(tail(payload), scope)


SYSTEM = ("system", "You are an agent. Use the tools.")
TASK = ("user", parts("New task:\nread notes.txt"))


# ---------------------------------------------------------------- smolagents

def test_smolagents_tool_call_and_observation():
    payload = body(SYSTEM, TASK, ("assistant", parts(smol_call("call_1", "read_file", {"path": "notes.txt"}))),
                   ("user", parts("Observation:\nhello world")))
    [a] = actions_of(payload)
    assert (a.convention, a.tool_name, a.arguments, a.observation, a.is_error) == (
        "smolagents_calls", "text:read_file", {"path": "notes.txt"}, "hello world", None)
    assert a.call_id.startswith("text:")  # "call_1" is too short to be unique: scoped


def test_smolagents_thought_before_the_calls_and_provider_id_kept():
    provider_id = "call_4f0a9c1be2d34a7788c1f0aa"
    text = "I will read the file.\n" + smol_call(provider_id, "read_file", {"path": "a"})
    [a] = actions_of(body(TASK, ("assistant", parts(text)), ("user", parts("Observation:\nx"))))
    assert (a.call_id, a.tool_name) == (provider_id, "read_file")  # the structured call the response carried


def test_smolagents_code_agent_call():
    code = 'print(read_file(path="a.txt"))'
    text = f"Thought: read it\n<code>\n{code}\n</code>\n" + smol_call("call_2", "python_interpreter", code)
    obs = "Observation:\nExecution logs:\nhello\nLast output from code snippet:\nNone"
    [a] = actions_of(body(TASK, ("assistant", parts(text)), ("user", parts(obs))))
    assert (a.tool_name, a.arguments) == ("text:python_interpreter", code)
    assert a.observation.startswith("Execution logs:")


def test_smolagents_failed_step_is_a_failure():
    text = smol_call("call_3", "read_file", {"path": "missing"})
    obs = "Call id: call_3\nError:\nFile not found\nNow let's retry."
    [a] = actions_of(body(TASK, ("assistant", parts(text)), ("user", parts(obs))))
    assert a.is_error is True and a.observation.startswith("Error:\nFile not found")


def test_smolagents_parallel_calls_share_the_observation():
    listing = [{"id": f"call_{i}", "type": "function", "function": {"name": "grep", "arguments": {"q": q}}}
               for i, q in enumerate("ab")]
    actions = actions_of(body(TASK, ("assistant", "Calling tools:\n" + str(listing)),
                              ("user", "Observation:\nnone\nnone")))
    assert [a.arguments for a in actions] == [{"q": "a"}, {"q": "b"}]
    assert {a.observation for a in actions} == {"none\nnone"} and len({a.call_id for a in actions}) == 2


def test_smolagents_listing_that_is_not_a_literal_is_hashed_as_text_without_ids():
    def turn(call_id: str) -> str:
        return f"Calling tools:\n[{{'id': '{call_id}', 'function': <object at 0x7f>}}]"
    one = actions_of(body(TASK, ("assistant", turn("a1")), ("user", "Observation:\nx")))
    two = actions_of(body(TASK, ("assistant", turn("b2")), ("user", "Observation:\nx")))
    assert one[0].tool_name == "text:tool_calls" and one[0].arguments == two[0].arguments


# ---------------------------------------------------------------- ReAct

REACT_CASES = [
    ("Thought: look\nAction: read_file\nAction Input: {\"path\": \"a\"}", "text:read_file", '{"path": "a"}'),
    ("Thought: search\nAction 1: Search[Apple Remote]", "text:Search", "Apple Remote"),
    ('Action:\n{"name": "read_file", "arguments": {"path": "a"}}', "text:read_file", {"path": "a"}),
    ('Action:\n```json\n{"action": "grep", "action_input": "needle"}\n```', "text:grep", "needle"),
    ("Action: `list_dir`\nAction Input: .", "text:list_dir", "."),
]


@pytest.mark.parametrize(("text", "name", "arguments"), REACT_CASES)
def test_react_action_formats(text, name, arguments):
    [a] = actions_of(body(TASK, ("assistant", text), ("user", "Observation: 3 lines")))
    assert (a.convention, a.tool_name, a.arguments, a.observation) == ("react", name, arguments, "3 lines")


def test_react_final_answer_after_the_action_is_not_an_action():
    text = "Action: read_file\nAction Input: a\nObservation: x\nThought: done\nFinal Answer: 42"
    assert actions_of(body(TASK, ("assistant", text), ("user", "thanks"))) == []


def test_react_scratchpad_in_one_user_turn():
    pad = ("Question: what is in a?\nThought: read\nAction: read_file\nAction Input: a\nObservation: alpha\n"
           "Thought: again\nAction: read_file\nAction Input: a\nObservation: alpha\n"
           "Thought: and again\nAction: read_file\nAction Input: b\nObservation: beta\nThought:")
    actions = actions_of(body(("user", pad)))
    assert [(a.arguments, a.observation) for a in actions] == [("a", "alpha"), ("b", "beta")]
    assert actions[0].convention == "react_scratchpad"


# ---------------------------------------------------------------- code blocks

def test_fenced_code_block_and_next_turn_output():
    text = "Let me run it.\n```python\nprint(open('a').read())\n```"
    [a] = actions_of(body(TASK, ("assistant", text), ("user", "Output:\nalpha")))
    assert (a.convention, a.tool_name, a.arguments, a.observation) == (
        "code_block", "text:code", "print(open('a').read())", "Output:\nalpha")


def test_the_last_code_block_is_the_action():
    text = "```\nfirst\n```\nthen\n```sh\nls -la\n```"
    [a] = actions_of(body(TASK, ("assistant", text), ("user", "total 0")))
    assert a.arguments == "ls -la"


# ---------------------------------------------------------------- repeated pair

def test_a_pair_seen_once_is_not_an_action():
    assert actions_of(body(TASK, ("assistant", "I fixed it."), ("user", "the test still fails"))) == []


def test_repeated_pair_yields_both_pairs():
    actions = actions_of(body(TASK, ("assistant", "I fixed it (call_aaaaaaaa1)."), ("user", "the test still fails"),
                              ("assistant", "I fixed it (call_bbbbbbbb2)."), ("user", "the test still fails")))
    assert [a.convention for a in actions] == ["repeated_pair"] * 2
    assert actions[0].arguments == actions[1].arguments and actions[0].call_id != actions[1].call_id


def test_an_exact_repeat_is_left_to_repeated_response():
    assert actions_of(body(TASK, ("assistant", "I fixed it."), ("user", "the test still fails"),
                           ("assistant", "I fixed it."), ("user", "the test still fails"))) == []


def test_pairs_with_different_replies_are_not_actions():
    assert actions_of(body(TASK, ("assistant", "Fixed call_aaaaaaaa1."), ("user", "3 tests fail"),
                           ("assistant", "Fixed call_bbbbbbbb2."), ("user", "2 tests fail"))) == []


# ---------------------------------------------------------------- structured path wins, ids, tail

def test_structured_turns_are_left_to_the_structured_path():
    chat = {"messages": [{"role": "user", "content": "go"},
                         {"role": "assistant", "content": "Action: x\nAction Input: 1",
                          "tool_calls": [{"id": "c", "type": "function",
                                          "function": {"name": "x", "arguments": "{}"}}]},
                         {"role": "tool", "tool_call_id": "c", "content": "ok"}]}
    anthropic = {"messages": [{"role": "user", "content": "go"},
                              {"role": "assistant", "content": [{"type": "text", "text": "```\nls\n```"},
                                                                {"type": "tool_use", "id": "t", "name": "x",
                                                                 "input": {}}]},
                              {"role": "user",
                               "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]}
    responses = {"input": [{"role": "user", "content": "go"},
                           {"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": "```\nls\n```"}]},
                           {"type": "function_call", "call_id": "f", "name": "x", "arguments": "{}"},
                           {"type": "function_call_output", "call_id": "f", "output": "ok"}]}
    for payload in (chat, anthropic, responses):
        assert actions_of(payload) == []


def test_responses_input_and_text_parts_are_read():
    payload = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "go"}]},
                         {"role": "assistant", "content": [{"type": "output_text", "text": "```\nls\n```"}]},
                         {"role": "user", "content": [{"type": "input_text", "text": "a b"}]}]}
    [a] = actions_of(payload)
    assert (a.arguments, a.observation) == ("ls", "a b")


def test_ids_are_stable_for_a_resent_history_and_scoped_by_conversation():
    turns = [TASK, ("assistant", smol_call("call_1", "read_file", {"path": "a"})), ("user", "Observation:\nx")]
    first = actions_of(body(*turns))[0].call_id
    later = body(*turns, ("assistant", smol_call("call_2", "read_file", {"path": "a"})), ("user", "Observation:\nx"))
    assert first == actions_of(body(*turns))[0].call_id
    assert first != actions_of(body(*turns), scope="s:other")[0].call_id
    assert actions_of(later)[0].call_id != first


def test_a_pending_action_has_no_result():
    payload = body(TASK, ("assistant", "```\nls\n```"))
    [a] = actions_of(payload)
    assert a.observation is None
    calls, results = guard_calls([a])
    assert len(calls) == 1 and results == []


def test_tail_reads_back_to_the_second_last_assistant_turn_only():
    many = [("user", f"u{i}") if i % 2 == 0 else ("assistant", f"a{i}") for i in range(40)]
    turns = tail(body(*many))
    assert [t.role for t in turns].count("assistant") == TAIL_ASSISTANT_TURNS
    assert turns[0].index == 37 and turns[-1].index == 39


def test_odd_shapes_never_raise():
    for payload in (None, [], {}, {"messages": "x"},
                    {"messages": [None, 3, {"role": 5}, {"role": "user", "content": 7}]},
                    {"input": "just text"}, body(("assistant", "Calling tools:\n[" + "[" * 5000 + "]" * 5000 + "]"),
                                                 ("user", "x"))):
        extract(tail(payload), KEY)
    # many openers without closers: each convention reads the text a bounded number of times
    for opener in ("<code>", "```", "\nCalling tools:\n[", "\nAction: x\nAction Input: "):
        [a] = extract(tail(body(("assistant", opener * 20_000 + "\n```\nls\n```"), ("user", "y"))), KEY) or [None]
        assert a is None or a.observation == "y"


def test_observation_label_and_mask():
    assert observation_of("Observation:\nabc") == ("abc", None)
    assert observation_of("Observation 2: abc") == ("abc", None)
    assert mask_volatile("id call_Ab12cd34 and 123e4567-e89b-12d3-a456-426614174000") == "id <id> and <id>"


def test_latest_answer_hash():
    assert latest_answer_sha256([Turn(0, "user", "q")]) is None
    assert latest_answer_sha256([Turn(0, "assistant", ""), Turn(1, "user", "q")]) is None
    a = latest_answer_sha256([Turn(0, "assistant", "x"), Turn(1, "user", "q")])
    assert a == latest_answer_sha256([Turn(5, "assistant", "x")]) and len(a) == 64


def test_seed_without_scratchpad():
    prompt = "Answer the question.\nQuestion: what is in a?\nThought:"
    grown = prompt + " read it\nAction: read_file\nAction Input: a\nObservation: alpha\nThought:"
    assert seed_without_scratchpad(grown) == "Answer the question.\nQuestion: what is in a?\n"
    assert seed_without_scratchpad(grown + " again\nAction: read_file\nAction Input: a\nObservation: alpha\n") \
        == seed_without_scratchpad(grown)
    assert seed_without_scratchpad(prompt) == prompt  # no block yet
    assert seed_without_scratchpad("Action: plan the launch") == "Action: plan the launch"
