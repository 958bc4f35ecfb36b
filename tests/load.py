"""Background POST load for fault tests: client threads post chat completions to one or
more gateways until stopped, recording ``(sent, answered, status)`` of every request
(monotonic times; status 0: the connection failed)."""

from __future__ import annotations

import threading
import time

import httpx

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class Load:
    def __init__(self, urls: list[str], token: str, threads: int = 16) -> None:
        self.urls = urls
        self.token = token
        self.results: list[tuple[float, float, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, i: int) -> None:
        url = self.urls[i % len(self.urls)] + "/v1/chat/completions"
        with httpx.Client(timeout=30, headers={"authorization": f"Bearer {self.token}"}) as client:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    status = client.post(url, json=BODY).status_code
                except httpx.HTTPError:
                    status = 0
                with self._lock:
                    self.results.append((sent, time.monotonic(), status))
                if status != 200:
                    time.sleep(0.01)

    def __enter__(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def statuses(self) -> list[int]:
        with self._lock:
            return [s for _, _, s in self.results]

    def ok_after(self, t: float) -> float | None:
        """When the first request sent after ``t`` that got a 200 was answered, or ``None``."""
        with self._lock:
            return min((at for sent, at, s in self.results if sent > t and s == 200), default=None)

    def wait_for_ok_after(self, t: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            at = self.ok_after(t)
            if at is not None:
                return at
            time.sleep(0.02)
        raise AssertionError(f"no 200 within {timeout} s after the fault")
