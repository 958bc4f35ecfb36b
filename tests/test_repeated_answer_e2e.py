"""Repeated answers, precisely (repeated_response counts an answer only when the model was
shown it and gave it again), through a real gateway: separate one-shot runs behind one
canned prefix are never stopped, a conversation that grows by the same answer is."""

from __future__ import annotations

import itertools

import openai

from app.guard.conversation_rules import answer_repeats
from tests.test_loop_guard_v2_e2e import wait_for_stop

# A fixed example exchange every request starts with, in the manner of Aider's prompts.
CANNED = [
    {"role": "system", "content": "You are an expert software developer. Reply with edit blocks."},
    {"role": "user", "content": "Change greet() to say hello."},
    {"role": "assistant", "content": "To make this change, edit greet.py:\n```python\nprint('hello')\n```"},
    {"role": "user", "content": "I switched to a new code base; forget the files above."},
    {"role": "assistant", "content": "Ok."},
]


#: The tests of the latch: repeated_response's action set to latch (its default strikes first,
#: tests/test_strikes_e2e.py).
LATCH = {"rule_actions": {"repeated_response": "latch"}}


def client(gateway, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)


def test_answer_repeats_rule():
    assert answer_repeats("a" * 64, "a" * 64) and not answer_repeats("a" * 64, "b" * 64)
    assert answer_repeats(None, "b" * 64)  # nothing shown (previous_response_id): the stored answer decides


def test_separate_one_shot_runs_behind_a_canned_prefix_are_not_stopped(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("text", text="Hi!")
    c = client(gateway, token)
    for _ in range(8):  # eight `--message "say hi"` runs: each one fresh request, same answer
        c.chat.completions.create(model="mock-model", messages=[*CANNED, {"role": "user", "content": "say hi"}])
    assert wait_for_stop(admin, task_id, timeout=0.5)["status"] == "active"


def test_a_conversation_behind_the_prefix_repeating_its_answer_is_stopped(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("text", text="Hi!")
    c = client(gateway, token)
    messages = [*CANNED, {"role": "user", "content": "say hi"}]
    for _ in range(6):  # the first answer repeats nothing; the next five repeat what the model saw
        answer = c.chat.completions.create(model="mock-model", messages=messages).choices[0].message.content
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "and again"}]
    task = wait_for_stop(admin, task_id)
    assert task["stop_reason"] == "repeated_response" and task["stop_detail"]["count"] == 5


def test_an_answer_the_model_was_not_shown_ends_the_run(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("text", text="Hi!")
    c = client(gateway, token)
    messages = [{"role": "user", "content": "say hi"}]
    for turn in range(10):  # the client resends a different text than it got every third turn
        answer = c.chat.completions.create(model="mock-model", messages=messages).choices[0].message.content
        shown = answer if turn % 3 else "Hello."
        messages += [{"role": "assistant", "content": shown}, {"role": "user", "content": "again"}]
    assert wait_for_stop(admin, task_id, timeout=0.5)["status"] == "active"


def test_answers_differing_only_in_ids_are_stopped_by_the_text_fallback(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    c = client(gateway, token)
    ids = itertools.count(0xA0000000)
    messages = [{"role": "user", "content": "fix the test"}]
    for turn in range(8):
        upstream.script("text", text=f"Applied the edit (call_{next(ids):x}).")
        try:
            answer = c.chat.completions.create(model="mock-model", messages=messages).choices[0].message.content
        except openai.BadRequestError:
            break
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "the test still fails"}]
    task = admin.task(task_id)
    assert turn == 5  # its 6th request shows the 5th repeated pair and is refused
    assert task["stop_reason"] == "repeated_tool_call" and task["stop_detail"]["tool_name"] == "text:reply"
