"""A latency probe in its own process, so nothing the test process does (building a
24 MiB body, the scripted upstream parsing it) shows in the figures.

``python -m tests.latency_probe URL TOKEN [MINIMUM]`` sends one small chat completion
after another until its standard input is closed (and at least ``MINIMUM`` were sent),
then prints the latencies (seconds) as a JSON list. Non-200 answers print as ``-status``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support import free_port


@contextmanager
def upstream_process() -> Iterator[str]:
    """The scripted upstream in its own process (its base URL), so that its parsing a
    huge request body does not stall the test process's threads."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.testing.upstream", "--port", str(port),
                             "--log-level", "warning", "--max-recorded", "10"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the upstream process did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


class Probe:
    """The probe process: :meth:`stop` closes its input and returns the latencies."""

    def __init__(self, url: str, token: str, minimum: int = 40, source: str | None = None) -> None:
        args = [sys.executable, "-m", "tests.latency_probe", url, token, str(minimum)]
        if source is not None:
            args.append(source)
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def stop(self) -> list[float]:
        out, _ = self.proc.communicate(timeout=300)
        return json.loads(out)


def main() -> None:
    url, token, minimum = sys.argv[1], sys.argv[2], int(sys.argv[3])
    source = sys.argv[4] if len(sys.argv) > 4 else None
    transport = httpx.HTTPTransport(local_address=source) if source else None
    client = httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=60,
                          transport=transport)
    body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    samples: list[float] = []
    while not closed.is_set() or len(samples) < minimum:
        started = time.perf_counter()
        try:
            status = client.post("/v1/chat/completions", json=body).status_code
        except httpx.HTTPError:
            status = 599
        samples.append(time.perf_counter() - started if status == 200 else -float(status))
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
