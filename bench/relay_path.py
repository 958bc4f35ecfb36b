"""The relay path alone, in-process: µs of gateway CPU and of wall time per relayed
request, for a plain answer the loop guard has nothing to judge (issue 34 item 3: a
verdict before the last byte must not cost the plain request anything measurable).

One :class:`app.proxy.relay.RelayResponse` per request, run as the ASGI app against
the benchmark's fixed upstream (:mod:`bench.upstream`, its own process, so this
process's CPU is the relay's), with the repeated-output monitor on as a guarded
inference POST has it, and its :class:`app.proxy.accounting.Accounting` (built for
every guarded request), given to the relay as its verdict hook when the relay takes
one (it finds nothing to judge in a first answer without tool calls). Admission and the
accounting after the last byte are left out (the same either way): ``on_finish`` does
nothing.

Shapes: a non-streamed answer (``bench-c4-s16``: 64 characters) and a 20-chunk
stream written at once (``bench-c20-s16``). Rounds alternate the shapes; the report
gives the median over rounds of CPU µs and wall µs per request.

Run: ``python -m bench.relay_path [--requests 2000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from app.admission import in_flight
from app.guard.repeated_output import OutputMonitor
from app.proxy.accounting import Accounting
from app.proxy.outcome import Outcome, Watchdog
from app.proxy.relay import RelayResponse
from app.proxy.upstream import create_client
from app.settings import Settings
from app.wire import CHAT_COMPLETIONS
from bench.aio import run
from bench.services import start_upstream

SHAPES = {"body": ("bench-c4-s16", False), "stream": ("bench-c20-s16", True)}


async def _nothing(outcome: Outcome) -> None:
    return None


async def _receive() -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {"type": "http.disconnect"}


async def _send(message: MutableMapping[str, Any]) -> None:
    return None


def _takes_verdict() -> bool:
    return "verdict" in inspect.signature(RelayResponse.__init__).parameters


async def _round(client: Any, url: str, model: str, stream: bool, requests: int,
                 settings: Settings) -> tuple[float, float]:
    """CPU and wall µs per request over ``requests`` relayed one after another."""
    body = (b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}]%s}'
            % (model.encode(), b', "stream": true' if stream else b""))
    takes_verdict = _takes_verdict()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(requests):
        # every guarded request has its Accounting (before and after); after, it is also the hook
        accounting = Accounting(None, settings, "bench-task", "k", True, stream=stream, metered=True)
        extra = {"verdict": accounting} if takes_verdict else {}
        response = RelayResponse(client, client.build_request("POST", url, content=body), CHAT_COMPLETIONS,
                                 stream_requested=stream, watchdog=Watchdog(300, 300), total_timeout_s=60,
                                 on_finish=_nothing, endpoint="/v1/chat/completions", model=model,
                                 monitor=OutputMonitor(True), **extra)
        await response({"type": "http"}, _receive, _send)
        in_flight.closed("bench-task")  # what the accounting's own end does
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu / requests * 1e6, wall / requests * 1e6


async def _main(requests: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        upstream = start_upstream(Path(tmp))
        try:
            settings = Settings()
            client = create_client(settings)
            url = f"{upstream.url}/v1/chat/completions"
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in SHAPES}
            for name, (model, stream) in SHAPES.items():  # warm-up
                await _round(client, url, model, stream, 200, settings)
            for _ in range(rounds):
                for name, (model, stream) in SHAPES.items():
                    results[name].append(await _round(client, url, model, stream, requests, settings))
            await client.aclose()
        finally:
            upstream.stop()
    print(f"verdict hook: {'yes' if _takes_verdict() else 'no'}; {rounds} rounds of {requests} requests")
    for name, rows in results.items():
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        spread = ", ".join(f"{r[0]:.1f}" for r in rows)
        print(f"{name:6s} CPU {cpu:7.1f} µs/request (rounds {spread}); wall {wall:7.1f} µs/request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    run(_main(args.requests, args.rounds))


if __name__ == "__main__":
    main()
