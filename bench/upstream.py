"""The benchmark's fixed upstream: a minimal OpenAI-compatible chat server that
answers at once.

Every path is measured against this one server, so its cost is the floor the
"direct" column shows. It is a bare HTTP/1.1 server on an asyncio ``Protocol``
(uvloop when installed), keeps connections alive, and renders each distinct
response once and caches the bytes.

What it answers is chosen by the request's ``model`` name, so one server serves
every scenario and a proxy that rewrites requests (LiteLLM) still selects it::

    bench[-c<chunks>][-s<size>][-d<delay_ms>][-h<hold_s>]

- ``c``: content deltas in a streamed answer (default 1); a non-streamed answer
  carries ``chunks * size`` characters of content.
- ``s``: characters of content per delta (default 16).
- ``d``: milliseconds between deltas (default 0: the whole stream in one write,
  each event still its own HTTP chunk). With ``d`` every event is a separate write.
- ``h``: seconds to hold the stream open after the first content delta (default 0),
  then finish. Used to keep many streams open at once; bounded by ``--max-hold-s``.

Streams are ``text/event-stream`` with chunked transfer encoding and end with
``data: [DONE]``; ``stream_options.include_usage`` adds the usage chunk. Non-streamed
answers carry ``usage``. ``GET /v1/models`` and ``GET /healthz`` answer too;
``GET /_bench/stats`` gives the connections accepted and POSTs answered so far
(to see whether a proxy reuses its upstream connections).

Run: ``python -m bench.upstream --port 9100``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
from dataclasses import dataclass

from bench.aio import run

_MODEL_RE = re.compile(rb'"model"\s*:\s*"([^"]{1,200})"')
_STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
_USAGE_RE = re.compile(rb'"include_usage"\s*:\s*true')
_LENGTH_RE = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_NAME_RE = re.compile(r"^bench((?:-[cdhs]\d+(?:\.\d+)?)*)$")

CREATED = 1_700_000_000
"""Fixed ``created`` timestamp (s) so every response is byte-identical and cacheable."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What one model name asks for: ``chunks`` deltas of ``size`` characters,
    ``delay_s`` seconds apart, held ``hold_s`` seconds after the first delta."""

    chunks: int = 1
    size: int = 16
    delay_s: float = 0.0
    hold_s: float = 0.0


def parse_model(name: str) -> Shape | None:
    """The :class:`Shape` for a model name, ``None`` when it is not ``bench...``."""
    m = _NAME_RE.match(name)
    if m is None:
        return None
    fields: dict[str, float] = {}
    for part in m.group(1).split("-")[1:]:
        fields[part[0]] = float(part[1:])
    return Shape(
        chunks=max(1, int(fields.get("c", 1))),
        size=max(0, int(fields.get("s", 16))),
        delay_s=fields.get("d", 0.0) / 1000.0,
        hold_s=fields.get("h", 0.0),
    )


def model_name(chunks: int = 1, size: int = 16, delay_ms: float = 0, hold_s: float = 0) -> str:
    """The model name selecting a response shape (inverse of :func:`parse_model`)."""
    name = f"bench-c{chunks}-s{size}"
    if delay_ms:
        name += f"-d{delay_ms:g}"
    if hold_s:
        name += f"-h{hold_s:g}"
    return name


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _content(shape: Shape, i: int) -> str:
    return (chr(ord("a") + i % 26) * shape.size) if shape.size else ""


def render_body(model: str, shape: Shape) -> bytes:
    """A non-streamed ``chat.completion`` body."""
    text = "".join(_content(shape, i) for i in range(shape.chunks))
    return _dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": CREATED, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": max(1, len(text) // 4),
                  "total_tokens": 10 + max(1, len(text) // 4)},
    })


def render_events(model: str, shape: Shape, include_usage: bool) -> list[bytes]:
    """The SSE events of a streamed answer, each already framed as one HTTP chunk.
    Index 0 is the role chunk, 1..chunks the content deltas, then finish, usage
    (optional), ``[DONE]``."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": CREATED, "model": model}

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + _dumps({**base, "choices": [choice]}) + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": _content(shape, i)}) for i in range(shape.chunks)]
    events.append(chunk({}, "stop"))
    if include_usage:
        tokens = max(1, shape.chunks * shape.size // 4)
        events.append(b"data: " + _dumps({**base, "choices": [], "usage": {
            "prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}}) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events]


_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"cache-control: no-cache\r\nx-request-id: bench\r\ntransfer-encoding: chunked\r\n\r\n")
_CHUNKED_END = b"0\r\n\r\n"


def _json_response(status: int, body: bytes) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nx-request-id: bench\r\n"
            b"content-length: %d\r\n\r\n%s" % (status, reason, len(body), body))


class _Cache:
    """Rendered responses keyed by (model, stream, include_usage), and the
    server's counters (``GET /_bench/stats``)."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.items: dict[tuple[bytes, bool, bool], tuple[Shape, bytes | list[bytes]]] = {}

    def get(self, model: bytes, stream: bool, usage: bool) -> tuple[Shape, bytes | list[bytes]] | None:
        key = (model, stream, usage)
        hit = self.items.get(key)
        if hit is None:
            name = model.decode("utf-8", "replace")
            shape = parse_model(name)
            if shape is None:
                return None
            value: bytes | list[bytes]
            if stream:
                value = render_events(name, shape, usage)
            else:
                value = _json_response(200, render_body(name, shape))
            if len(self.items) > 1024:
                self.items.clear()
            hit = self.items[key] = (shape, value)
        return hit


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: parse requests (Content-Length bodies only), answer."""

    def __init__(self, cache: _Cache, max_hold_s: float) -> None:
        self.cache = cache
        self.max_hold_s = max_hold_s
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a paced/held stream is being written
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.cache.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[: end + 2])
            m = _LENGTH_RE.search(head)
            length = int(m.group(1)) if m else 0
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            self._answer(head, body)

    def _answer(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        line = head[: head.find(b"\r\n")]
        method, _, rest = line.partition(b" ")
        path = rest.partition(b" ")[0]
        if method == b"GET":
            if path == b"/_bench/stats":
                self.transport.write(_json_response(200, _dumps(
                    {"connections": self.cache.connections, "requests": self.cache.requests})))
            elif path.endswith(b"/models"):
                self.transport.write(_json_response(200, b'{"object":"list","data":[]}'))
            else:
                self.transport.write(_json_response(200, b'{"status":"ok"}'))
            return
        self.cache.requests += 1
        m = _MODEL_RE.search(body)
        stream = _STREAM_RE.search(body) is not None
        hit = self.cache.get(m.group(1) if m else b"bench", stream, stream and _USAGE_RE.search(body) is not None)
        if hit is None:
            self.transport.write(_json_response(
                404, b'{"error":{"message":"unknown bench model","type":"invalid_request_error"}}'))
            return
        shape, value = hit
        if not stream:
            self.transport.write(value)  # type: ignore[arg-type]
            return
        events: list[bytes] = value  # type: ignore[assignment]
        if shape.delay_s <= 0 and shape.hold_s <= 0:
            self.transport.write(_STREAM_HEAD + b"".join(events) + _CHUNKED_END)
            return
        self.busy = True
        asyncio.get_running_loop().create_task(self._paced(shape, events))

    async def _paced(self, shape: Shape, events: list[bytes]) -> None:
        """Write a stream event by event (``delay_s`` apart), holding ``hold_s``
        after the first content delta; stops early when the client goes away."""
        assert self.transport is not None
        write = self.transport.write
        write(_STREAM_HEAD + events[0] + events[1])
        hold = min(shape.hold_s, self.max_hold_s)
        waited = 0.0
        while waited < hold and not self.closed:
            step = min(0.25, hold - waited)
            await asyncio.sleep(step)
            waited += step
        for event in events[2:]:
            if self.closed:
                return
            if shape.delay_s > 0:
                await asyncio.sleep(shape.delay_s)
            write(event)
        if self.closed:
            return
        write(_CHUNKED_END)
        self.busy = False
        if self.buf:
            self._process()


async def serve(host: str, port: int, max_hold_s: float) -> None:
    """Serve until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    cache = _Cache()
    server = await loop.create_server(lambda: UpstreamProtocol(cache, max_hold_s), host, port,
                                      backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"bench upstream: http://{host}:{port}/v1", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--max-hold-s", type=float, default=120.0, help="upper bound on any hold (s)")
    args = parser.parse_args(argv)
    run(serve(args.host, args.port, args.max_hold_s))


if __name__ == "__main__":
    main()
