"""Repeated output inside one streamed answer, and the per-task timeout of
non-streamed requests, end to end: real gateway, scripted upstream, official SDKs."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

USER = [{"role": "user", "content": "explain the configuration"}]
#: The tests of the latch: repeated_output's action set to latch (its default strikes first,
#: tests/test_strikes_e2e.py).
LATCH = {"rule_actions": {"repeated_output": "latch"}}
#: The terminal error's message of a stream cut for repeating itself, in every wire format.
CUT_SENTENCE = ("The model kept repeating the same passage in this answer; taskgate cut the stream and "
                "stopped the task (repeated_output).")


def wait_for_stop(admin, task_id: str, timeout: float = 5) -> dict:
    deadline = time.monotonic() + timeout
    while (task := admin.task(task_id))["status"] != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    return task


def test_chanting_chat_stream_is_cut_and_the_task_latched(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.01)  # trickled: cut mid-answer
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    pieces: list[str] = []
    with pytest.raises(openai.APIError) as exc:
        for chunk in client.chat.completions.create(model="mock-model", messages=USER, stream=True):
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
    assert exc.value.code == "repeated_output" and exc.value.type == "task_stopped"
    assert exc.value.message == CUT_SENTENCE  # the sentence itself, not a JSON document
    phrase = "Let me check the configuration file once more. "
    assert "".join(pieces).count(phrase) < 60  # cut before the end of the answer
    task = wait_for_stop(admin, task_id)
    assert task["stop_reason"] == "repeated_output" and task["stop_detail"]["count"] >= 10
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="mock-model", messages=USER)


def test_chanting_responses_stream_ends_with_response_failed(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.01)
    r = httpx.post(gateway.url + "/v1/responses", headers={"authorization": f"Bearer {token}"},
                   json={"model": "mock-model", "input": "explain", "stream": True}, timeout=30)
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "repeated_output", "message": CUT_SENTENCE}
    assert not any(e["type"] == "response.completed" for e in events)
    assert wait_for_stop(admin, task_id)["stop_reason"] == "repeated_output"


def test_chanting_messages_stream_ends_with_an_error_event(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.01)
    client = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as exc:
        with client.messages.stream(model="mock-model", max_tokens=100, messages=USER) as s:
            s.get_final_message()
    assert exc.value.body == {"type": "error", "error": {"type": "api_error", "message": CUT_SENTENCE}}
    assert wait_for_stop(admin, task_id)["stop_reason"] == "repeated_output"


def test_a_chanting_answer_that_arrived_whole_is_not_cut_but_latches_the_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60, chunks=60)  # one write: relayed whole before it is read
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    with client.chat.completions.stream(model="mock-model", messages=USER) as s:
        assert s.get_final_completion().choices[0].message.content.count("once more") == 60
    assert wait_for_stop(admin, task_id)["stop_reason"] == "repeated_output"


def test_chanting_in_a_body_latches_the_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    answer = client.chat.completions.create(model="mock-model", messages=USER).choices[0].message.content
    assert answer.count("once more") == 60  # a body cannot be cut: it is delivered whole
    assert wait_for_stop(admin, task_id)["stop_reason"] == "repeated_output"


def test_repeated_output_can_be_turned_off_per_task(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"repeated_output": False})
    upstream.script("chant", repeats=60, chunks=60)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    with client.chat.completions.stream(model="mock-model", messages=USER) as s:
        assert s.get_final_completion().choices[0].message.content.count("once more") == 60
    assert wait_for_stop(admin, task_id, timeout=0.5)["status"] == "active"


def test_non_streamed_requests_have_a_per_task_timeout_counted_as_a_stall(gateway, admin, upstream):
    task_id, token = admin.create_task(upstream_timeout_s=0.5, max_stalls=2)
    upstream.script("delay", delay_s=30)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, timeout=20)
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as exc:
            client.chat.completions.create(model="mock-model", messages=USER)
        assert exc.value.status_code == 504 and time.monotonic() - started < 10
    task = wait_for_stop(admin, task_id)
    assert task["stop_reason"] == "repeated_stalls" and task["stalls"] == 2
    assert [e["kind"] for e in admin.events(task_id)].count("upstream_timeout") == 2


# ------------------------------------------------------------ what the next request reads (issue 34)

#: What the scripted chant repeated, as the stop sentence names it (the same however split).
REPEATED = ('a 10-word passage ("Let me check the configuration file once more Let me") came 10 times, '
            'on average every 8.0 words')


def refusal_prefix(task_id: str, why: str) -> str:
    return f"Task '{task_id}' is stopped (repeated_output: {why}). Counters: "


def test_the_refusal_after_a_cut_stream_says_the_stream_was_cut(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.01)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model="mock-model", messages=USER, stream=True):
            pass
    assert wait_for_stop(admin, task_id)["stop_detail"]["delivered"] == "cut"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="mock-model", messages=USER)
    why = f"the model kept repeating itself inside one streamed answer: {REPEATED}; taskgate cut the stream"
    assert exc.value.body["message"].startswith(refusal_prefix(task_id, why))


def test_the_refusal_after_a_non_streamed_repeating_answer_says_it_was_delivered_whole(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    assert client.chat.completions.create(model="mock-model", messages=USER).choices[0].message.content
    assert wait_for_stop(admin, task_id)["stop_detail"]["delivered"] == "whole"
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="mock-model", messages=USER)
    message = exc.value.body["message"]
    why = (f"the model kept repeating itself inside one answer, which was not streamed: {REPEATED}; "
           "the answer was delivered whole and the task was stopped after it")
    assert message.startswith(refusal_prefix(task_id, why))
    assert "streamed answer" not in message and "cut" not in message  # nothing was streamed or cut
    assert admin.task(task_id)["stop_message"] == message  # the operator reads what the agent read


def test_the_refusal_after_a_stream_that_arrived_whole_says_it_was_not_cut(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard=LATCH)
    upstream.script("chant", repeats=60, chunks=60)  # one write: relayed whole before it is read
    client = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0)
    with client.messages.stream(model="mock-model", max_tokens=100, messages=USER) as s:
        assert s.get_final_message().content[0].text.count("once more") == 60
    assert wait_for_stop(admin, task_id)["stop_detail"]["delivered"] == "streamed"
    with pytest.raises(anthropic.APIStatusError) as exc:
        client.messages.create(model="mock-model", max_tokens=100, messages=USER)
    assert exc.value.status_code == 409
    why = (f"the model kept repeating itself inside one streamed answer: {REPEATED}; the stream had ended "
           "before taskgate read the repetition, so the answer reached the client whole and the task was "
           "stopped after it")
    assert exc.value.body["error"]["message"].startswith(refusal_prefix(task_id, why))
