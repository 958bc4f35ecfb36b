"""Hostile input to the three inference endpoints (issue 8, "Done when").

Hypothesis writes requests to ``/v1/chat/completions``, ``/v1/responses`` and
``/v1/messages``: bodies shaped like each format with any JSON value in any field
(lone surrogates, NUL, huge and non-finite numbers, wrong types), raw bytes (invalid
UTF-8), nesting 1,000-20,000 deep, and extra headers with arbitrary bytes. Each request
goes over a raw socket, so no client library cleans it up. For every request:

- the gateway answers, below 500;
- the task's counter moves exactly when upstream received the request: a refused
  request is never counted;
- the gateway process stays up, and answers a normal request at the end.

By default 150 derandomized examples (the same every run, about 30 s);
``TASKGATE_FUZZ_EXAMPLES=N`` explores N random ones instead.
"""

from __future__ import annotations

import json
import os
import socket

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")
HUGE = ["1" + "0" * 5000, "1e400", "-1e400", "NaN", "Infinity", "-0", "123456789012345678901234567890",
        str(2**63), str(-(2**63) - 1), "1e-400"]

texts = st.text(alphabet=st.characters(codec=None), max_size=40) | st.sampled_from(
    ["", "\x00", "\ud800", "a\udfffb", "x" * 10_000, "read_file", "call_1"])
leaves = st.none() | st.booleans() | st.integers() | st.floats() | texts | st.sampled_from(HUGE).map(lambda n: {"\x00raw": n})
anything = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                        max_leaves=8)


def either(*values):
    return st.one_of(*[st.just(v) if not isinstance(v, st.SearchStrategy) else v for v in values], anything)


tool_call = st.fixed_dictionaries({"id": either("call_1"), "type": either("function"),
                                   "function": either(st.fixed_dictionaries({"name": either("read_file"), "arguments": either('{"p": 1}')}))})
chat_message = st.fixed_dictionaries({"role": either("user", "assistant", "tool", "system"), "content": anything},
                                     optional={"tool_calls": either(st.lists(tool_call, max_size=3)), "tool_call_id": either("call_1")})
chat = st.fixed_dictionaries({"model": either("mock-model"), "messages": either(st.lists(chat_message, max_size=4))},
                             optional={"stream": either(True), "tools": anything, "stream_options": anything})
responses_item = st.one_of(
    st.fixed_dictionaries({"type": either("function_call"), "call_id": either("call_1"), "name": either("read_file"), "arguments": anything}),
    st.fixed_dictionaries({"type": either("function_call_output"), "call_id": either("call_1"), "output": anything}),
    st.fixed_dictionaries({"role": either("user", "assistant"), "content": anything}))
responses = st.fixed_dictionaries({"model": either("mock-model"), "input": either("hi", st.lists(responses_item, max_size=4))},
                                  optional={"stream": either(True), "instructions": anything})
block = st.one_of(
    st.fixed_dictionaries({"type": either("tool_use"), "id": either("toolu_1"), "name": either("read_file"), "input": anything}),
    st.fixed_dictionaries({"type": either("tool_result"), "tool_use_id": either("toolu_1"), "content": anything},
                          optional={"is_error": anything}),
    st.fixed_dictionaries({"type": either("text"), "text": anything}))
anthropic_message = st.fixed_dictionaries({"role": either("user", "assistant"), "content": either("hi", st.lists(block, max_size=3))})
messages = st.fixed_dictionaries({"model": either("mock-model"), "max_tokens": either(16),
                                  "messages": either(st.lists(anthropic_message, max_size=4))},
                                 optional={"stream": either(True), "system": anything})
SHAPES = {"/v1/chat/completions": chat, "/v1/responses": responses, "/v1/messages": messages}


def encode(value: object) -> bytes:
    """JSON text, with ``{"\\x00raw": token}`` replaced by the raw number token."""
    text = json.dumps(value)
    for token in HUGE:
        text = text.replace(json.dumps({"\x00raw": token}), token)
    return text.encode()


@st.composite
def bodies(draw: st.DrawFn, path: str) -> bytes:
    kind = draw(st.sampled_from(["shaped", "shaped", "shaped", "any", "bytes", "deep"]))
    if kind == "shaped":
        return encode(draw(SHAPES[path]))
    if kind == "any":
        return encode(draw(anything))
    if kind == "bytes":
        return draw(st.binary(max_size=200) | st.sampled_from([b"\xff\xfe{}", b'{"model": "\xc3\x28"}', b"\x00",
                                                                b'{"a": "\\ud800"}']))
    depth = draw(st.integers(1_000, 20_000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    return ('{"model": "mock-model", "max_tokens": 5, "messages": [{"role": "user", "content": '
            + opener * depth + "1" + closer * depth + "}]}").encode()


header_names = st.sampled_from([b"x-session-id", b"anthropic-version", b"x-forwarded-for", b"content-type",
                                b"x-title", b"openai-beta", b"x-fuzz"])
header_values = st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
requests = st.sampled_from(PATHS).flatmap(lambda path: st.tuples(
    st.just(path), bodies(path), st.lists(st.tuples(header_names, header_values), max_size=3)))


def send(port: int, path: str, token: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    head = [b"POST " + path.encode() + b" HTTP/1.1", b"host: 127.0.0.1", b"authorization: Bearer " + token.encode(),
            b"content-length: " + str(len(body)).encode(), b"connection: close"]
    head += [name + b": " + value for name, value in headers]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_hostile_requests_never_5xx_and_refusals_are_never_counted(gateway, admin, upstream):
    # the loop guard's thresholds out of reach: the scripted upstream gives the same answer to
    # every request, which is the upstream repeating itself (a strike: 502), not client input
    task_id, token = admin.create_task(request_limit=1_000_000, loop_guard={"identical_streak": 1000,
                                       "cycle_repeats": 1000, "failure_streak": 1000, "response_repeats": 1000})
    state = {"admitted": 0, "forwarded": 0}

    explore = os.environ.get("TASKGATE_FUZZ_EXAMPLES")

    @settings(max_examples=int(explore or 150), deadline=None, derandomize=not explore,
              database=None, suppress_health_check=list(HealthCheck))
    @given(requests)
    @example(("/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": ' + b"[" * 10_000 + b"]" * 10_000 + b"}]}", []))
    @example(("/v1/messages", b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}', [(b"x-session-id", b"\xff\xfe")]))
    @example(("/v1/responses", b'{"model": "m", "input": [{"type": "function_call_output", "call_id": "a\\u0000b", "output": "x"}]}', []))
    @example(("/v1/chat/completions", json.dumps({"model": "m", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "\ud800", "type": "function", "function": {"name": "x" * 1_000_000, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "\ud800", "content": "ok"}]}).encode(), []))
    @example(("/v1/messages", json.dumps({"model": "m", "max_tokens": 5, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t\x00", "name": "n\x00", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t\x00", "content": "ok"}]}]}).encode(), []))
    def one(request: tuple[str, bytes, list[tuple[bytes, bytes]]]) -> None:
        path, body, headers = request
        response = send(gateway.port, path, token, body, headers)
        assert response.startswith(b"HTTP/1.1 "), (path, body[:200], response[:200])
        status = int(response.split(b" ", 2)[1])
        assert status < 500, (path, body[:300], headers, response[:600])
        assert gateway.proc.poll() is None
        task = admin.task(task_id)
        forwarded = len(upstream.requests)
        assert task["admitted_requests"] - state["admitted"] == forwarded - state["forwarded"], (status, path, body[:300])
        state["admitted"], state["forwarded"] = task["admitted_requests"], forwarded
        if task["status"] != "active":
            assert admin.http.post(f"/admin/tasks/{task_id}/resume", json={"reason": "fuzz"}).status_code == 200

    one()
    ok = send(gateway.port, "/v1/chat/completions", token,
              b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}', [])
    assert ok.startswith(b"HTTP/1.1 200 ")
