"""A verdict before the last byte, and a strike before the latch (issue 34 items 3 and 2),
through a real gateway process, the scripted upstream and the official SDKs.

Item 3: an answer the loop guard judges has its decision written before its last byte,
so the agent's next request, sent at once, always meets it (50 runs each, no delay).
Item 2: the soft rules (repeated_output, repeated_response) strike first: the answer is
cut or withheld, the next request of the conversation carries the gateway's note, the
task stays active; a second strike in the conversation within the window latches.
"""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from app.guard.strike_rules import answer_sentence
from tests.console_support import sample, scrape
from tests.support import Admin, GatewayProcess

USER = [{"role": "user", "content": "explain the configuration"}]
CHANT = "scenario:chant"  # the upstream's default chant, whatever the script: 40 repeats, one body
LATCH_OUTPUT = {"rule_actions": {"repeated_output": "latch"}}
LATCH_ANSWER = {"rule_actions": {"repeated_response": "latch"}}
PHRASE = "Let me check the configuration file once more. "


def chat(gateway: GatewayProcess, token: str, **kwargs: object) -> httpx.Response:
    """One chat completion posted with no client of its own in between (no retries)."""
    body = {"model": "mock-model", "messages": USER, **kwargs}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {token}"})


def forwarded_notes(upstream) -> list[str]:  # type: ignore[no-untyped-def]
    """The gateway notes of the last request upstream received (chat: system messages)."""
    messages = upstream.requests[-1].json["messages"]
    return [m["content"] for m in messages if m["role"] == "system" and m["content"].startswith("[taskgate]")]


# ------------------------------------------------------------ item 3: the verdict before the last byte


def test_a_non_streamed_repeating_answer_then_the_next_request_at_once_is_refused_every_time(gateway, admin):
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for run in range(50):
            task_id, token = admin.create_task(loop_guard=LATCH_OUTPUT)
            headers = {"authorization": f"Bearer {token}"}
            answer = http.post("/v1/chat/completions", headers=headers, json={"model": CHANT, "messages": USER})
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"].count(PHRASE) == 40, answer.text
            following = http.post("/v1/chat/completions", headers=headers,  # no delay: as an agent does
                                  json={"model": "mock-model", "messages": USER})
            assert following.status_code == 400, (run, following.text)
            assert following.json()["error"]["code"] == "repeated_output", (run, following.text)


def test_a_stream_that_arrived_whole_then_the_next_request_at_once_is_refused_every_time(gateway, admin, upstream):
    upstream.script("chant", repeats=60, chunks=60)  # one write: the terminal event comes with the text
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for run in range(20):
            task_id, token = admin.create_task(loop_guard=LATCH_OUTPUT)
            headers = {"authorization": f"Bearer {token}"}
            stream = http.post("/v1/chat/completions", headers=headers,
                               json={"model": "mock-model", "messages": USER, "stream": True})
            assert stream.text.rstrip().endswith("data: [DONE]")  # released whole, after the latch
            following = http.post("/v1/chat/completions", headers=headers,
                                  json={"model": "mock-model", "messages": USER})
            assert following.status_code == 400, (run, following.text)


def test_the_same_answer_again_then_the_next_request_at_once_is_refused_every_time(gateway, admin, upstream):
    upstream.script("text", text="I am done.")
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for run in range(20):
            task_id, token = admin.create_task(loop_guard={**LATCH_ANSWER, "response_repeats": 1})
            headers = {"authorization": f"Bearer {token}"}
            shown = [*USER, {"role": "assistant", "content": "I am done."}, {"role": "user", "content": "go on"}]
            answer = http.post("/v1/chat/completions", headers=headers, json={"model": "mock-model", "messages": shown})
            assert answer.status_code == 200  # the answer the model was shown, given again: the threshold (1)
            following = http.post("/v1/chat/completions", headers=headers,
                                  json={"model": "mock-model", "messages": shown})
            assert following.status_code == 400 and following.json()["error"]["code"] == "repeated_response", \
                (run, following.text)


def test_a_tool_call_over_the_ceiling_then_the_next_request_at_once_is_refused_every_time(gateway, admin, upstream):
    upstream.script("tool_call", parallel=2)
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        for run in range(20):
            task_id, token = admin.create_task(tool_call_limit=1)
            headers = {"authorization": f"Bearer {token}"}
            calls = http.post("/v1/chat/completions", headers=headers, json={"model": "mock-model", "messages": USER})
            assert len(calls.json()["choices"][0]["message"]["tool_calls"]) == 2
            following = http.post("/v1/chat/completions", headers=headers,
                                  json={"model": "mock-model", "messages": USER})
            assert following.status_code == 400 and following.json()["error"]["code"] == "tool_call_limit", \
                (run, following.text)


# ------------------------------------------------------------ item 2: a strike before the latch


def test_a_chanting_body_is_withheld_noted_in_band_and_the_second_latches(gateway, admin, upstream):
    task_id, token = admin.create_task()
    first = chat(gateway, token, model=CHANT)
    assert first.status_code == 502
    error = first.json()["error"]
    assert error["code"] == "repeated_output" and error["type"] == "upstream_error"
    assert error["message"] == answer_sentence("repeated_output", {"count": 10}, streamed=False, window_s=3600)
    task = admin.task(task_id)
    assert task["status"] == "active" and task["strikes"] == 1 and task["pending_notes"] == 1
    strike = admin.wait_for_event(task_id, "loop_strike")
    assert strike["reason"] == "repeated_output" and strike["detail"]["strike"] == 1
    assert strike["message"].startswith("Strike 1 of 2 (repeated_output)")

    assert chat(gateway, token).status_code == 200  # the next request of the conversation carries the note
    notes = forwarded_notes(upstream)
    assert len(notes) == 1 and "kept repeating the same passage" in notes[0] and PHRASE.split(".")[0] in notes[0]
    assert admin.task(task_id)["pending_notes"] == 0
    assert chat(gateway, token).status_code == 200 and forwarded_notes(upstream) == []  # delivered once

    second = chat(gateway, token, model=CHANT)  # the second strike in the window latches, as before
    assert second.status_code == 200 and second.json()["choices"][0]["message"]["content"].count(PHRASE) == 40
    task = admin.task(task_id)
    assert task["status"] == "stopped" and task["stop_reason"] == "repeated_output"
    assert task["stop_detail"]["strikes"] == 2 and task["stop_detail"]["strike_window_s"] == 3600
    assert chat(gateway, token).status_code == 400


def test_a_trickled_chanting_stream_is_cut_the_task_goes_on(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.01)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    pieces: list[str] = []
    with pytest.raises(openai.APIError) as exc:
        for chunk in client.chat.completions.create(model="mock-model", messages=USER, stream=True):
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
    assert "".join(pieces).count(PHRASE) < 60  # cut
    assert exc.value.code == "repeated_output" and exc.value.type == "upstream_error"
    assert exc.value.message == answer_sentence("repeated_output", {"count": 10}, streamed=True, window_s=3600)
    task = admin.task(task_id)
    assert task["status"] == "active" and task["strikes"] == 1
    upstream.script("text", text="The port is 8080.")
    assert client.chat.completions.create(model="mock-model", messages=USER).choices[0].message.content
    assert len(forwarded_notes(upstream)) == 1


def test_a_struck_messages_stream_ends_with_an_api_error_and_the_note_is_a_user_text_block(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.01)
    client = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as exc:
        with client.messages.stream(model="mock-model", max_tokens=100, messages=USER) as s:
            s.get_final_message()
    assert exc.value.body["error"]["type"] == "api_error"
    assert "strike 1 of 2" in exc.value.body["error"]["message"]
    upstream.script("text", text="The port is 8080.")
    client.messages.create(model="mock-model", max_tokens=100, messages=USER)
    last_user = upstream.requests[-1].json["messages"][-1]
    assert last_user["role"] == "user" and any(
        block.get("type") == "text" and block["text"].startswith("[taskgate] Note:") for block in last_user["content"])
    assert admin.task(task_id)["status"] == "active"


def test_the_same_answer_again_is_withheld_once_then_latches(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"response_repeats": 2})
    upstream.script("text", text="I am done.")
    shown = [*USER, {"role": "assistant", "content": "I am done."}, {"role": "user", "content": "go on"}]
    assert chat(gateway, token, messages=shown).status_code == 200  # 1 repeat
    withheld = chat(gateway, token, messages=shown)  # 2: the threshold; withheld, the task goes on
    assert withheld.status_code == 502 and withheld.json()["error"]["code"] == "repeated_response"
    assert admin.task(task_id)["status"] == "active"
    assert chat(gateway, token, messages=shown).status_code == 200  # carries the note; the same answer again: 3
    assert any("same answer" in n for n in forwarded_notes(upstream))
    task = admin.task(task_id)
    assert task["status"] == "stopped" and task["stop_reason"] == "repeated_response"
    assert task["stop_detail"]["strikes"] == 2


def test_one_answer_draws_one_strike_whichever_rules_it_trips(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"response_repeats": 1})
    upstream.script("chant", repeats=40)
    chant = [*USER, {"role": "assistant", "content": PHRASE * 40}, {"role": "user", "content": "go on"}]
    r = chat(gateway, token, messages=chant)  # repeats itself and the answer it was shown: two rules, one answer
    assert r.status_code == 502 and r.json()["error"]["code"] == "repeated_output"
    task = admin.task(task_id)
    assert task["status"] == "active" and task["strikes"] == 1


def test_the_action_is_per_task_warn_delivers_and_notes(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"rule_actions": {"repeated_output": "warn"}})
    upstream.script("chant", repeats=60, chunks=60, chunk_delay_s=0.005)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    text = "".join(c.choices[0].delta.content or "" for c in
                   client.chat.completions.create(model="mock-model", messages=USER, stream=True) if c.choices)
    assert text.count(PHRASE) == 60  # not cut
    upstream.script("text")
    client.chat.completions.create(model="mock-model", messages=USER)
    assert len(forwarded_notes(upstream)) == 1
    task = admin.task(task_id)
    assert task["status"] == "active" and task["strikes"] == 0
    assert admin.wait_for_event(task_id, "loop_warning")["reason"] == "repeated_output"


def test_strikes_are_counted_in_metrics(gateway, admin, upstream):
    before = scrape(gateway.url)
    task_id, token = admin.create_task()
    assert chat(gateway, token, model=CHANT).status_code == 502
    assert chat(gateway, token).status_code == 200
    after = scrape(gateway.url)
    for name in ("taskgate_loop_strikes_total", "taskgate_loop_notes_total"):
        assert sample(after, name, rule="repeated_output") - sample(before, name, rule="repeated_output") == 1


def test_a_second_strike_after_the_window_is_a_first_strike_again(database_url, upstream):
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_STRIKE_WINDOW_S="1") as gw:
        admin = Admin(gw.url)
        task_id, token = admin.create_task()
        assert chat(gw, token, model=CHANT).status_code == 502
        time.sleep(2.0)  # past the 1 s window
        assert chat(gw, token, model=CHANT).status_code == 502  # strike 1 again
        assert admin.task(task_id)["status"] == "active" and admin.task(task_id)["strikes"] == 2
        assert chat(gw, token, model=CHANT).status_code == 200  # within the window: the latch
        assert admin.task(task_id)["stop_reason"] == "repeated_output"


def test_hard_rules_still_latch_on_the_first_breach(gateway, admin, upstream):
    task_id, token = admin.create_task(loop_guard={"identical_streak": 2})
    upstream.script("tool_call")
    messages = list(USER)
    for i in range(3):
        r = chat(gateway, token, messages=messages)
        if r.status_code == 400:
            break
        call = r.json()["choices"][0]["message"]["tool_calls"][0]
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": "same result"}]
    assert r.status_code == 400 and r.json()["error"]["code"] == "repeated_tool_call"
    assert admin.task(task_id)["strikes"] == 0


def test_a_withheld_responses_answer_is_a_502_and_the_note_a_developer_message(gateway, admin, upstream):
    task_id, token = admin.create_task()
    headers = {"authorization": f"Bearer {token}"}
    withheld = httpx.post(gateway.url + "/v1/responses", headers=headers, timeout=30,
                          json={"model": CHANT, "input": [{"role": "user", "content": "explain"}]})
    assert withheld.status_code == 502 and withheld.json()["error"]["code"] == "repeated_output"
    assert httpx.post(gateway.url + "/v1/responses", headers=headers, timeout=30,
                      json={"model": "mock-model",
                            "input": [{"role": "user", "content": "explain"}]}).status_code == 200
    sent = upstream.requests[-1].json["input"]
    assert sent[-1]["role"] == "developer" and "[taskgate] Note:" in json.dumps(sent[-1])
    assert admin.task(task_id)["status"] == "active"
