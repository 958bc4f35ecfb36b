"""The mock upstream's ASGI app: routing, scripting, generation, the control API."""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from typing import Any

from .exchange import (
    AbortConnection,
    Exchange,
    Receive,
    RecordedRequest,
    Send,
    content_cut,
    read_body,
    terminal_index,
)
from .reply import (
    PLACEHOLDER,
    Call,
    Event,
    Reply,
    arguments_text,
    dumps,
    estimate_tokens,
)
from .scenarios import MOCK_MODEL, SCENARIO_PREFIX, Script, make_script
from .text_tools import text_tool
from .wire import (
    BODIES,
    JSON_TYPE,
    MODEL_OBJECT,
    ROUTES,
    SSE_HEADERS,
    embeddings_body,
    error_body,
    heartbeat,
    malformed,
    render_stream,
)

PLAIN = frozenset({"text", "tool_call", "tool_cycle", "delay", "search", "chant", "text_tool"})
"""Scenarios whose streams are sent as they are (paced only by ``chunk_delay_s``)."""


class UpstreamApp:
    """The ASGI app. Thread-safe to script and inspect from outside its event loop."""

    def __init__(self, script: Script | None = None, *, max_recorded: int | None = None) -> None:
        self._lock = threading.Lock()
        self._script = script or make_script("text")
        self._requests: collections.deque[RecordedRequest] = collections.deque(maxlen=max_recorded)
        self._cycle_count = 0
        self._cache: dict[tuple[Any, ...], tuple[list[Event], bytes] | bytes] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Future[None] | None = None
        self.open_streams = 0
        self.open_requests = 0
        self.streams_opened = 0

    # -- scripting and inspection (any thread)

    def script(self, scenario: str, **params: Any) -> Script:
        """Set the default behaviour. See the module docstring for scenarios."""
        new = make_script(scenario, params)
        with self._lock:
            self._script = new
            self._cycle_count = 0
            self._cache.clear()
        return new

    @property
    def current_script(self) -> Script:
        return self._script

    def reset(self) -> None:
        """Forget recorded requests and go back to the default ``text`` script."""
        with self._lock:
            self._requests.clear()
            self._script = make_script("text")
            self._cycle_count = 0
            self._cache.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def disconnects(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.disconnected]

    def close_streams(self) -> None:
        """Abort every pausing response (used on shutdown). Callable from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.set_closing)

    def set_closing(self) -> None:
        fut = self.closing_future()
        if not fut.done():
            fut.set_result(None)

    def closing_future(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if self._closing is None or self._loop is not loop:
            self._loop = loop
            self._closing = loop.create_future()
        return self._closing

    # -- ASGI

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        path = scope["path"]
        if path.startswith("/_upstream/"):
            await self._control(scope["method"], path, body, send)
            return
        rec = self._record(scope, body)
        ex = Exchange(self, rec, receive, send)
        self.open_requests += 1
        try:
            await self._dispatch(ex, scope["method"], path)
        finally:
            self.open_requests -= 1
            ex.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._closing = None
                self.closing_future()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _record(self, scope: dict[str, Any], body: bytes) -> RecordedRequest:
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        query = scope.get("query_string", b"")
        path = scope["path"] + ("?" + query.decode("latin-1") if query else "")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rec = RecordedRequest(scope["method"], path, headers, body, parsed, time.monotonic())
        with self._lock:
            self._requests.append(rec)
        return rec

    async def _dispatch(self, ex: Exchange, method: str, path: str) -> None:
        route = path[3:] if path.startswith("/v1/") else path
        wire = ROUTES.get((method, route.rstrip("/") or "/"))
        if wire is None and method == "GET" and route.startswith("/models/"):
            ex.rec.wire = "models"
            await ex.json(200, {**MODEL_OBJECT, "id": route[len("/models/") :]})
            return
        ex.rec.wire = wire
        body = ex.rec.json if isinstance(ex.rec.json, dict) else {}
        if wire is None:
            await ex.json(404, error_body(None, 404, f"no route for {method} {path}", None, None))
        elif wire == "models":
            await ex.json(200, {"object": "list", "data": [MODEL_OBJECT]})
        elif wire == "embeddings":
            await ex.json(200, embeddings_body(body, len(ex.rec.body)))
        elif wire == "count_tokens":
            await ex.json(200, {"input_tokens": self._input_tokens(ex.rec)})
        elif wire == "input_tokens":
            await ex.json(200, {"object": "response.input_tokens", "input_tokens": self._input_tokens(ex.rec)})
        elif not isinstance(ex.rec.json, dict):
            await ex.json(400, error_body(wire, 400, "request body must be a JSON object", None, None))
        else:
            await self._generate(ex, wire, body)

    def _input_tokens(self, rec: RecordedRequest) -> int:
        fixed = self._script.params.get("input_tokens")
        return int(fixed) if fixed is not None else estimate_tokens(len(rec.body))

    # -- generation

    def _script_for(self, model: Any) -> Script:
        if isinstance(model, str) and model.startswith(SCENARIO_PREFIX):
            return make_script(model[len(SCENARIO_PREFIX) :])
        return self._script

    def _reply(self, script: Script, rec: RecordedRequest) -> Reply:
        p = script.params
        text = str(p["text"] or "")
        if script.scenario == "chant":
            text = str(p["phrase"]) * int(p["repeats"])
        if script.scenario in ("tool_cycle", "search", "text_tool"):
            with self._lock:
                n = self._cycle_count
                self._cycle_count += 1
        if script.scenario == "tool_cycle":
            call = p["calls"][n % len(p["calls"])]
            calls: tuple[Call, ...] = (Call(call["name"], arguments_text(call.get("arguments", {}))),)
        elif script.scenario == "search":
            calls = (Call(p["name"], arguments_text({"pattern": f"{p['pattern']}-{n}"})),)
        elif script.scenario == "text_tool":
            text, calls = text_tool(p, n), ()
        elif p["name"]:
            calls = (Call(p["name"], arguments_text(p["arguments"])),) * int(p["parallel"])
        else:
            calls = ()
        inp = p["input_tokens"]
        out = p["output_tokens"]
        out_bytes = len(text) + sum(len(c.arguments) + len(c.name) for c in calls)
        return Reply(
            text=text,
            calls=calls,
            chunks=int(p["chunks"]),
            input_tokens=int(inp) if inp is not None else estimate_tokens(len(rec.body)),
            output_tokens=int(out) if out is not None else estimate_tokens(out_bytes),
        )

    def _rendered(self, wire: str, model: str, reply: Reply, stream: bool, include_usage: bool) -> Any:
        """The response for ``reply`` with ids as placeholders, cached per second."""
        now = int(time.time())
        key = (wire, model, reply, stream, include_usage, now)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        value: tuple[list[Event], bytes] | bytes
        if stream:
            events = render_stream(wire, model, reply, PLACEHOLDER, now, include_usage)
            value = (events, b"".join(data for _, data in events))
        else:
            value = dumps(BODIES[wire](model, reply, PLACEHOLDER, now))
        if len(self._cache) >= 256:
            self._cache.clear()
        self._cache[key] = value
        return value

    async def _generate(self, ex: Exchange, wire: str, body: dict[str, Any]) -> None:
        rec = ex.rec
        model = body.get("model")
        try:
            script = self._script_for(model)
        except ValueError as exc:
            await ex.json(400, error_body(wire, 400, str(exc), None, None))
            return
        p = script.params
        rec.scenario = script.scenario
        rec.stream = stream = body.get("stream") is True
        if script.scenario == "error":
            headers = [(str(k).lower().encode(), str(v).encode()) for k, v in (p["headers"] or {}).items()]
            status = int(p["status"])
            await ex.json(status, error_body(wire, status, str(p["message"]), p["type"], p["code"]), headers)
            return
        if script.scenario == "delay" and not await ex.pause(float(p["delay_s"])):
            return
        reply = self._reply(script, rec)
        model_name = model if isinstance(model, str) else MOCK_MODEL
        if not stream:
            await self._answer(ex, script, self._rendered(wire, model_name, reply, False, False))
            return
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        events, joined = self._rendered(wire, model_name, reply, True, include_usage)
        self.open_streams += 1
        self.streams_opened += 1
        try:
            await ex.start(200, SSE_HEADERS)
            if script.scenario in PLAIN and float(p["chunk_delay_s"]) <= 0:
                await ex.write(joined, last=True)
            else:
                await self._stream(ex, script, wire, events)
        finally:
            self.open_streams -= 1

    async def _answer(self, ex: Exchange, script: Script, body: bytes) -> None:
        """A non-streamed answer, with the scenario's pathology if it has one."""
        name, p = script.scenario, script.params
        wait = {"stall": "stall_s", "heartbeats": "duration_s", "think": "think_s"}.get(name)
        if wait is not None and not await ex.pause(float(p[wait])):
            return
        if name in ("truncate", "close_mid_event"):
            await ex.start(200, [JSON_TYPE])
            await ex.write(body[: len(body) // 2])
            if name == "close_mid_event":
                raise AbortConnection("close_mid_event")
            await ex.write(b"", last=True)
        elif name == "malformed":
            await ex.json(200, b'{"id": "broken", "choices": [')
        else:
            await ex.json(200, body)

    async def _stream(self, ex: Exchange, script: Script, wire: str, events: list[Event]) -> None:
        name, p = script.scenario, script.params
        delay = float(p["chunk_delay_s"])
        cut = content_cut(events, int(p.get("after_events", 0)))
        head, tail = events[:cut], events[cut:]
        if name == "stall":
            ok = await ex.events(head, delay) and await ex.pause(float(p["stall_s"])) and await ex.events(tail, delay)
        elif name == "heartbeats":
            beats = ex.heartbeats(heartbeat(wire), float(p["interval_s"]), float(p["duration_s"]))
            ok = await ex.events(head, delay) and await beats and await ex.events(tail, delay)
        elif name == "think":  # no after_events: head is the preamble before any content
            interval = p["heartbeat_interval_s"]
            if not await ex.events(head, delay):
                return
            if interval:
                ok = await ex.heartbeats(heartbeat(wire), float(interval), float(p["think_s"]))
            else:
                ok = await ex.pause(float(p["think_s"]))
            ok = ok and await ex.events(tail, delay)
        elif name == "truncate":
            ok = await ex.events(events[: min(cut, terminal_index(events))], delay)
        elif name == "close_mid_event":
            if await ex.events(head, delay):
                partial = (tail or events[-1:])[0][1]
                await ex.write(partial[: len(partial) // 2])
                raise AbortConnection("close_mid_event")
            return
        elif name == "malformed":
            ok = await ex.events(head, delay)
            if ok:
                await ex.write(malformed(wire))
                ok = await ex.events(tail, delay)
        else:
            ok = await ex.events(events, delay)
        if ok:
            await ex.write(b"", last=True)

    # -- control API

    async def _control(self, method: str, path: str, body: bytes, send: Send) -> None:
        status, payload = 200, None
        if method == "GET" and path == "/_upstream/requests":
            payload = {
                "requests": [r.to_json() for r in self.requests],
                "open_streams": self.open_streams,
                "open_requests": self.open_requests,
                "streams_opened": self.streams_opened,
                "script": self._script.to_json(),
            }
        elif path == "/_upstream/script" and method == "GET":
            payload = self._script.to_json()
        elif path == "/_upstream/script" and method == "POST":
            try:
                data = json.loads(body or b"{}")
                payload = self.script(str(data.get("scenario", "text")), **(data.get("params") or {})).to_json()
            except (ValueError, TypeError, AttributeError) as exc:
                status, payload = 400, {"error": {"message": str(exc), "type": "invalid_request_error"}}
        elif method == "POST" and path == "/_upstream/reset":
            self.reset()
            payload = {"ok": True}
        else:
            status, payload = 404, {"error": {"message": f"no route for {method} {path}", "type": "not_found"}}
        data = dumps(payload)
        headers = [JSON_TYPE, (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

