"""The load generator: a separate process with a bare HTTP/1.1 client on asyncio.

It speaks just enough HTTP/1.1 (keep-alive, ``Content-Length`` and chunked bodies)
to time each request without an HTTP library's own cost in the figures; requests
are rendered to bytes before the clock starts.

Run as ``python -m bench.load SPEC.json``. The spec (see :class:`Spec`) names the
target, the bodies and the mode:

- ``closed``: ``concurrency`` connections, each sending its next request as soon as
  the previous answer is complete, for ``warmup_s`` (not counted) then until
  ``duration_s`` seconds or ``max_requests`` requests, whichever comes first.
- ``hold``: open ``streams`` streamed requests at once (``connect_concurrency`` at a
  time), wait until each has its first body byte (at most ``open_timeout_s`` for
  all), report, then keep them open until a line arrives on stdin (or
  ``hold_timeout_s``) and close them all.

Stdout carries one JSON object per line: ``{"event": "start"}`` and
``{"event": "end"}`` around the measured window (so the parent can read server
CPU counters at the same instants), ``{"event": "open", ...}`` in hold mode, and
finally ``{"event": "result", ...}``. Times in results are milliseconds unless the
key says otherwise; ``client_cpu_s`` is this process's CPU seconds in the window.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench.aio import run
from bench.http1 import EVENTS, Conn, ResponseError, connect
from bench.stats import summarize

# ---------------------------------------------------------------- request bodies

SYSTEM = "You are a coding agent under benchmark."
USER = "Summarise the repository in one sentence."


def chat_body(model: str, stream: bool) -> dict[str, Any]:
    """A small chat completions request (system + user message)."""
    body: dict[str, Any] = {"model": model, "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def tool_turn_body(model: str, prefix: str, i: int, new_conversation: bool = False) -> dict[str, Any]:
    """An agent turn that carries a new tool result: the previous assistant turn
    called ``read_file`` (unique call id and arguments) and the tool answered. Takes
    taskgate's agent-turn admission path (ledger insert + loop-guard verdict). All turns
    of a task share one conversation (its window grows to the guard's cap), unless
    ``new_conversation``: the first user message names the request, so each turn is a
    new conversation's first."""
    call_id = f"call_{prefix}_{i}"
    return {"model": model, "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{USER} (run {prefix}-{i})" if new_conversation else USER},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/{prefix}/{i}.py"})}}]},
        {"role": "tool", "tool_call_id": call_id, "content": f"# file {i}\nprint('hello {i}')\n"},
    ]}


def render_request(host: str, port: int, path: str, token: str, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> bytes:
    """The full HTTP/1.1 request bytes; ``headers`` are added as they are."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
            f"accept: */*\r\nauthorization: Bearer {token}\r\n{extra}content-length: {len(payload)}\r\n\r\n")
    return head.encode() + payload


@dataclass
class Spec:
    """What to send and how. ``tokens`` are cycled per request. ``body`` is
    ``{"kind": "chat", "model": M, "stream": bool}`` or
    ``{"kind": "tool_turn", "model": M, "prefix": P, "conversation": "new"|"task"}``
    (:func:`tool_turn_body`; "task" when absent; one unique body per request,
    so ``max_requests`` bounds the pool) or ``{"kind": "history", "model": M,
    "messages": N}`` (a resent agent history, :func:`bench.parsing.chat_history`)."""

    host: str
    port: int
    tokens: list[str]
    body: dict[str, Any]
    path: str = "/v1/chat/completions"
    mode: str = "closed"
    concurrency: int = 1
    warmup_s: float = 0.5
    duration_s: float = 3.0
    max_requests: int = 100_000
    min_requests: int = 0
    """Keep the window open past ``duration_s`` until this many latencies are
    measured (slow paths), but never past ``max_duration_s``."""
    max_duration_s: float = 15.0
    timeout_s: float = 30.0
    streams: int = 0
    connect_concurrency: int = 100
    hold_timeout_s: float = 60.0
    open_timeout_s: float = 30.0
    """Hold mode: the whole opening phase may take at most this long (s)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra request headers (the Portkey gateway's routing headers)."""

    def requests(self) -> list[bytes]:
        kind = self.body.get("kind", "chat")
        model = self.body["model"]
        if kind == "tool_turn":
            n = self.max_requests + 10_000  # warm-up draws from the same pool
            return [render_request(self.host, self.port, self.path, self.tokens[i % len(self.tokens)],
                                   tool_turn_body(model, self.body["prefix"], i,
                                                  self.body.get("conversation") == "new"), self.headers)
                    for i in range(n)]
        if kind == "history":
            from bench.parsing import chat_history

            body = chat_history(int(self.body["messages"]))
            body["model"], body["stream"] = model, False
        else:
            body = chat_body(model, bool(self.body.get("stream")))
        return [render_request(self.host, self.port, self.path, t, body, self.headers) for t in self.tokens]


# --------------------------------------------------------------------- runners


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


@dataclass
class _Tally:
    lat: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    incomplete_streams: int = 0

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def run_closed(spec: Spec) -> dict[str, Any]:
    """Closed-loop load; see the module docstring.

    The measured window is ``[start, end]``: it opens after the warm-up and closes
    after ``duration_s`` (later if fewer than ``min_requests`` latencies were
    measured, up to ``max_duration_s``; earlier at ``max_requests`` or an exhausted
    body pool);
    requests still in flight then are abandoned (connections aborted) and not
    counted. Latencies are of requests started and finished inside the window;
    ``completed`` and ``events`` count everything that finished inside it (rates)."""
    requests = spec.requests()
    stream = bool(spec.body.get("stream"))
    pool_bounded = spec.body.get("kind") == "tool_turn"
    loop = asyncio.get_running_loop()
    tally = _Tally()
    state = {"measuring": False, "t_start": 0.0, "completed": 0, "counter": 0}
    stop = asyncio.Event()
    conns: set[Conn] = set()

    async def worker() -> None:
        conn: Conn | None = None
        while not stop.is_set():
            i = state["counter"]
            if pool_bounded and i >= len(requests):
                stop.set()
                return
            state["counter"] = i + 1
            try:
                if conn is None or conn.closed:
                    conn = await connect(spec.host, spec.port)
                    conns.add(conn)
                t0 = time.perf_counter()
                in_window = state["measuring"]
                status, t_first, t_end, done = await conn.send(requests[i % len(requests)], spec.timeout_s)
                if conn.close_after:
                    conn.close()
                    conn = None
            except (OSError, ResponseError, asyncio.TimeoutError) as exc:
                if conn is not None:
                    conn.close()
                    conn = None
                if state["measuring"] and not stop.is_set():
                    tally.error(type(exc).__name__)
                    await asyncio.sleep(0.01)
                continue
            if stop.is_set() or not state["measuring"]:
                continue
            state["completed"] += 1
            key = str(status)
            tally.statuses[key] = tally.statuses.get(key, 0) + 1
            if status != 200:
                tally.error(f"http_{status}")
            elif in_window:
                if stream and not done:
                    tally.incomplete_streams += 1
                tally.lat.append((t_end - t0) * 1000.0)
                tally.ttfb.append((t_first - t0) * 1000.0)
                if len(tally.lat) >= spec.max_requests:
                    stop.set()

    tasks = [loop.create_task(worker()) for _ in range(spec.concurrency)]
    await asyncio.sleep(spec.warmup_s)
    state["measuring"] = True
    t_start, cpu_start, events_start = time.perf_counter(), time.process_time(), EVENTS[0]
    emit({"event": "start"})
    try:
        await asyncio.wait_for(stop.wait(), spec.duration_s)
    except asyncio.TimeoutError:
        hard_end = loop.time() + max(0.0, spec.max_duration_s - spec.duration_s)
        while len(tally.lat) < spec.min_requests and not stop.is_set() and loop.time() < hard_end:
            await asyncio.sleep(0.05)
    stop.set()
    wall = time.perf_counter() - t_start
    cpu = time.process_time() - cpu_start
    events = EVENTS[0] - events_start
    emit({"event": "end"})
    for conn in conns:
        conn.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    n = len(tally.lat)
    return {
        "n": n, "completed": state["completed"], "errors": tally.errors, "statuses": tally.statuses,
        "incomplete_streams": tally.incomplete_streams, "events": events,
        "wall_s": wall, "rps": state["completed"] / wall if wall > 0 else 0.0,
        "client_cpu_s": cpu, "latency_ms": summarize(tally.lat), "ttfb_ms": summarize(tally.ttfb),
    }


async def run_hold(spec: Spec) -> dict[str, Any]:
    """Open ``spec.streams`` streams, report, hold until told (stdin) or timed out."""
    requests = spec.requests()
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(spec.connect_concurrency)
    conns: list[Conn] = []
    ttfb: list[float] = []
    failures: dict[str, int] = {}

    def fail(kind: str) -> None:
        failures[kind] = failures.get(kind, 0) + 1

    async def open_one(i: int) -> None:
        async with sem:
            try:
                conn = await connect(spec.host, spec.port)
            except OSError as exc:
                fail(type(exc).__name__)
                return
            conns.append(conn)
            answer = conn.future = loop.create_future()  # conn.future is cleared when the answer ends
            conn.first = loop.create_future()
            t0 = time.perf_counter()
            conn.transport.write(requests[i % len(requests)])  # type: ignore[union-attr]
            await conn.first
            if answer.done():  # the whole answer came (or the connection broke): not held
                exc = answer.exception()
                fail(type(exc).__name__ if exc else f"finished_http_{answer.result()[0]}")
            elif conn.status != 200:
                fail(f"http_{conn.status}")
            else:
                ttfb.append((conn.t_first - t0) * 1000.0)

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    opening = [loop.create_task(open_one(i)) for i in range(spec.streams)]
    _, late = await asyncio.wait(opening, timeout=spec.open_timeout_s)
    for task in late:
        task.cancel()
        fail("not_open_in_time")
    await asyncio.gather(*late, return_exceptions=True)
    still_open = sum(1 for c in conns if not c.closed and c.t_first and c.future is not None and not c.future.done())
    emit({"event": "open", "opened": len(ttfb), "still_open": still_open, "failures": failures,
          "open_s": time.perf_counter() - t0})
    try:
        await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), spec.hold_timeout_s)
    except asyncio.TimeoutError:
        pass
    for c in conns:
        if c.future is not None and not c.future.done():
            c.future.cancel()
        c.close()
    await asyncio.sleep(0.05)
    return {"opened": len(ttfb), "still_open_at_report": still_open, "failures": failures,
            "ttfb_ms": summarize(ttfb), "client_cpu_s": time.process_time() - cpu0}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m bench.load SPEC.json")
    with open(args[0]) as f:
        spec = Spec(**json.load(f))
    runner = run_hold if spec.mode == "hold" else run_closed
    result = run(runner(spec))
    emit({"event": "result", **result})


if __name__ == "__main__":
    main()
