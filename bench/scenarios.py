"""The figures: each function runs one repeat of one figure on every available path
and returns measurement records ``{"figure", "path", "params", "repeat",
"result" | "error"}``. :mod:`bench.report` turns records into tables.

Latency-type results are milliseconds, CPU seconds, memory bytes (see
:mod:`bench.load` and :mod:`bench.metrics` for the result keys).
"""

from __future__ import annotations

import tempfile
import threading
import time
from typing import Any, Callable

import httpx

from bench import wrk
from bench.config import Config
from bench.driver import LoadError, run_load
from bench.load import chat_body
from bench.metrics import fdatasync_ms, rss_bytes
from bench.paths import TASKGATE, Path
from bench.services import Service, set_fsync
from bench.stats import summarize
from bench.upstream import model_name

Record = dict[str, Any]
NONSTREAM_MODEL = model_name(chunks=1, size=16)


def _record(figure: str, path: Path, params: dict[str, Any], repeat: int,
            fn: Callable[[], dict[str, Any]]) -> Record:
    rec: Record = {"figure": figure, "path": path.key, "params": params, "repeat": repeat}
    t0 = time.monotonic()
    try:
        rec["result"] = fn()
    except (LoadError, OSError, RuntimeError) as exc:
        rec["error"] = str(exc)[:2000]
    rec["elapsed_s"] = round(time.monotonic() - t0, 2)
    return rec


def _closed(path: Path, cfg: Config, *, body: dict[str, Any], concurrency: int, duration_s: float,
            warmup_s: float | None = None, tokens: list[str] | None = None,
            max_requests: int = 200_000, min_requests: int = 0) -> dict[str, Any]:
    spec = path.spec(body=body, concurrency=concurrency, duration_s=duration_s,
                     warmup_s=cfg.warmup_s if warmup_s is None else warmup_s, max_requests=max_requests,
                     min_requests=min_requests, max_duration_s=max(duration_s, cfg.max_window_s))
    if tokens is not None:
        spec["tokens"] = tokens
    return run_load(spec, path.watch())


def latency(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """Non-streaming chat completions at each concurrency; tokens spread over the
    1,000 tasks (one agent per task). Also the throughput figure (its best rps).
    At ``cfg.wrk_concurrencies`` each run is followed by the same load from wrk
    (``latency_wrk`` records: the tail figure)."""
    out = []
    for c in cfg.concurrencies:
        for p in paths:
            out.append(_record("latency", p, {"c": c}, repeat, lambda p=p, c=c: _closed(
                p, cfg, body={"kind": "chat", "model": NONSTREAM_MODEL, "stream": False},
                concurrency=c, duration_s=cfg.duration_s, min_requests=cfg.min_samples)))
            if cfg.use_wrk and c in cfg.wrk_concurrencies:
                out.append(_record("latency_wrk", p, {"c": c}, repeat, lambda p=p, c=c: wrk.run(
                    p.spec(concurrency=c, duration_s=cfg.duration_s), chat_body(NONSTREAM_MODEL, False), p.watch())))
    return out


def durable(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """The durable reservation's cost: non-streaming runs on the embedded server
    with ``fsync`` on (every admission commit waits for the disk) and off (it does
    not), back to back; fsync is on again afterwards. Also the disk's own
    write + fdatasync time, timed here just before."""
    out = []
    for p in paths:
        if p.key != "taskgate_embedded" or not p.database_url:
            continue
        out.append(_record("durable", p, {"probe": "fdatasync"}, repeat,
                           lambda: {"latency_ms": summarize(fdatasync_ms(tempfile.gettempdir()))}))
        try:
            for c in cfg.durable_concurrencies:
                for fsync in ("on", "off"):
                    set_fsync(p.database_url, fsync == "on")
                    out.append(_record("durable", p, {"c": c, "fsync": fsync}, repeat, lambda p=p, c=c: _closed(
                        p, cfg, body={"kind": "chat", "model": NONSTREAM_MODEL, "stream": False},
                        concurrency=c, duration_s=cfg.duration_s)))
        finally:
            set_fsync(p.database_url, True)
    return out


def tool_turn(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """Agent turns carrying a new tool result: taskgate's agent-turn admission path
    (ledger writes, loop-guard verdict) on every request; each turn a new conversation,
    or all of a task's turns one (``cfg.tool_turn_conversations``)."""
    out = []
    for c in cfg.tool_turn_concurrencies:
        for conversation in cfg.tool_turn_conversations:
            for p in paths:
                if p.key not in TASKGATE:
                    continue
                prefix = f"r{repeat}c{c}{conversation[0]}{p.key[9:12]}{int(time.time())}"
                body = {"kind": "tool_turn", "model": NONSTREAM_MODEL, "prefix": prefix, "conversation": conversation}
                out.append(_record("tool_turn", p, {"c": c, "conversation": conversation}, repeat,
                                   lambda p=p, c=c, body=body: _closed(p, cfg, body=body, concurrency=c,
                                                                       duration_s=cfg.duration_s,
                                                                       max_requests=15_000)))
    return out


def stream(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """Streams of 50 and 500 chunks at c=1, the upstream writing each stream at
    once: time to first byte, total time (wall-clock per-chunk slope)."""
    out = []
    for n in cfg.chunk_counts:
        for p in paths:
            out.append(_record("stream", p, {"chunks": n}, repeat, lambda p=p, n=n: _closed(
                p, cfg, body={"kind": "chat", "model": model_name(n, cfg.chunk_size), "stream": True},
                concurrency=1, duration_s=cfg.stream_duration_s, min_requests=cfg.stream_min_samples)))
    return out


def relay_cpu(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """Streams whose chunks arrive one by one (``paced_delay_ms`` apart), at
    ``paced_concurrency``: the proxy's CPU per relayed chunk."""
    out = []
    for n in cfg.chunk_counts:
        for p in paths:
            if p.key == "direct":
                continue
            model = model_name(n, cfg.chunk_size, delay_ms=cfg.paced_delay_ms)
            out.append(_record("relay_cpu", p, {"chunks": n}, repeat, lambda p=p, model=model: _closed(
                p, cfg, body={"kind": "chat", "model": model, "stream": True},
                concurrency=cfg.paced_concurrency, duration_s=cfg.paced_duration_s,
                warmup_s=cfg.paced_warmup_s)))
    return out


def admission(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """One hot task vs 1,000 tasks: end to end through the gateway at the highest
    concurrency (spread is the latency figure's run), and ``admit()`` alone."""
    out = []
    top = max(cfg.concurrencies)
    for p in paths:
        if p.key not in TASKGATE:
            continue
        out.append(_record("admission_e2e", p, {"tasks": 1, "c": top}, repeat, lambda p=p: _closed(
            p, cfg, body={"kind": "chat", "model": NONSTREAM_MODEL, "stream": False},
            concurrency=top, duration_s=cfg.duration_s, tokens=[p.hot_token])))
        for tasks, tokens in ((1, [p.hot_token]), (len(p.spread_tokens), p.spread_tokens)):
            spec = {"database_url": p.database_url, "tokens": tokens, "concurrency": cfg.admission_concurrency,
                    "warmup_s": cfg.warmup_s, "duration_s": cfg.admission_duration_s}
            watch = p.watch()
            watch.groups.pop("proxy", None)
            watch.groups.pop("upstream", None)
            out.append(_record("admission_only", p, {"tasks": tasks, "c": cfg.admission_concurrency}, repeat,
                               lambda spec=spec, watch=watch: run_load(spec, watch, module="bench.admission")))
    return out


def history(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """Added latency as the conversation grows: chat bodies of 10 and 500 messages
    (each turn a tool call and ~400 bytes of result) at c=1, the history resent
    every request as agents do."""
    out = []
    for n in cfg.history_sizes:
        for p in paths:
            if p.key not in ("direct", "taskgate_embedded"):
                continue
            out.append(_record("history", p, {"messages": n}, repeat, lambda p=p, n=n: _closed(
                p, cfg, body={"kind": "history", "model": NONSTREAM_MODEL, "messages": n},
                concurrency=1, duration_s=cfg.history_duration_s)))
    return out


def memory(paths: list[Path], cfg: Config, repeat: int) -> list[Record]:
    """RSS of a *fresh* proxy process with ``open_streams`` streams open at once
    (the upstream holds each after its first content delta); per stream = (RSS
    open − RSS before) ÷ streams still open when RSS was read. The fresh processes
    start together (LiteLLM takes ~20 s) and each is stopped right after its
    measurement, which also ends its held upstream streams."""
    targets = [p for p in paths
               if p.key in ("taskgate_embedded", "bare_relay", "portkey", "litellm") and p.fresh_proxy is not None]
    started: dict[str, Any] = {}

    def start(p: Path) -> None:
        try:
            started[p.key] = p.fresh_proxy()  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001
            started[p.key] = exc

    threads = [threading.Thread(target=start, args=(p,), daemon=True) for p in targets]
    for t in threads:
        t.start()
    out = []
    for p, t in zip(targets, threads):
        t.join(240)
        svc = started.get(p.key)
        if not isinstance(svc, Service):
            out.append({"figure": "memory", "path": p.key, "params": {"streams": cfg.open_streams},
                        "repeat": repeat, "error": f"fresh proxy did not start: {svc}"})
            continue
        try:
            out.append(_record("memory", p, {"streams": cfg.open_streams}, repeat,
                               lambda p=p, svc=svc: _hold(p, svc, cfg)))
        finally:
            svc.stop()
    return out


def _hold(p: Path, svc: Service, cfg: Config) -> dict[str, Any]:
    token = p.spread_tokens[0] if p.spread_tokens else p.hot_token
    warm(svc.port, token, cfg)
    time.sleep(0.5)
    before = rss_bytes(svc.pid)

    def on_open(msg: dict[str, Any]) -> dict[str, Any]:
        time.sleep(cfg.settle_s)
        return {"rss_open": rss_bytes(svc.pid)}

    spec = p.spec(mode="hold", streams=cfg.open_streams, connect_concurrency=100,
                  body={"kind": "chat", "model": model_name(2, cfg.chunk_size, hold_s=cfg.hold_s), "stream": True},
                  open_timeout_s=cfg.open_timeout_s, hold_timeout_s=30.0)
    spec["port"] = svc.port
    result = run_load(spec, None, on_open=on_open, timeout_s=cfg.open_timeout_s + 60)
    time.sleep(cfg.settle_s)
    held = result.get("held", {})
    still_open = held.get("open", {}).get("still_open", 0)
    rss_open = held.get("rss_open", before)
    result.update({
        "rss_before": before, "rss_open": rss_open, "rss_after_close": rss_bytes(svc.pid),
        "per_stream_bytes": (rss_open - before) / still_open if still_open else None,
    })
    return result


def warm(port: int, token: str, cfg: Config, budget_s: float = 60.0, *,
         headers: dict[str, str] | None = None, streams: bool = True) -> int:
    """Untimed requests of every response shape (non-streaming only unless
    ``streams``) to the proxy on ``port`` (bounded by ``budget_s`` seconds), so no
    figure pays for lazy imports or cold pools. Returns how many failed."""
    shapes = [(NONSTREAM_MODEL, False, cfg.warm_requests)]
    if streams:
        shapes += [(model_name(n, cfg.chunk_size), True, max(2, cfg.warm_requests // 4)) for n in cfg.chunk_counts]
        shapes += [(model_name(cfg.chunk_counts[0], cfg.chunk_size, delay_ms=cfg.paced_delay_ms), True, 1)]
    deadline = time.monotonic() + budget_s
    failures = 0
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                      headers={"authorization": f"Bearer {token}", **(headers or {})}) as client:
        for model, stream, count in shapes:
            body = chat_body(model, stream)
            for _ in range(count):
                if time.monotonic() > deadline:
                    return failures
                try:
                    failures += client.post("/v1/chat/completions", json=body).status_code != 200
                except httpx.HTTPError:
                    failures += 1
    return failures


def parsing(cfg: Config, repeat: int) -> list[Record]:
    """In-process request parsing cost (see :mod:`bench.parsing`)."""
    from bench import parsing as parse_bench

    return [{"figure": "parsing", "path": "in_process", "params": {"format": r["format"], "messages": r["messages"]},
             "repeat": repeat, "result": r} for r in parse_bench.measure(cfg.parse_budget_s)]


PATH_FIGURES: dict[str, Callable[[list[Path], Config, int], list[Record]]] = {
    "latency": latency,
    "durable": durable,
    "tool_turn": tool_turn,
    "stream": stream,
    "relay_cpu": relay_cpu,
    "admission": admission,
    "history": history,
    "memory": memory,
}
