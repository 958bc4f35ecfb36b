"""A loopback receiver of the stop webhook (a real HTTP server in a thread) and a gateway
process posting to it, as fixtures: ``from tests.webhook_receiver import hooked, receiver``.

The receiver records every POST (its JSON body and content type), answers with the
statuses a test queues (then 200) and can be made slow (``delay_s``)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from tests.support import GatewayProcess, free_port


class Receiver:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.statuses: list[int] = []  # answered in order, then 200
        self.delay_s = 0.0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.posts.append({"body": json.loads(body),
                                       "content_type": self.headers["content-type"]})
                time.sleep(receiver.delay_s)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/taskgate?secret=s3cr3t"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, count: int, timeout: float = 15.0) -> list[dict]:
        """The posts once there are ``count`` (or after ``timeout`` s, however many came)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.posts) < count:
            time.sleep(0.02)
        return self.posts

    def reset(self) -> None:
        """Forget the posts, the queued statuses and the delay."""
        self.posts.clear()
        self.statuses.clear()
        self.delay_s = 0.0


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture(scope="module")
def hooked(database_url, upstream, receiver) -> Iterator[GatewayProcess]:
    """A gateway whose stop webhook posts to ``receiver``: 3 attempts 0.05 s apart, 8 s each."""
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_STOP_WEBHOOK_URL=receiver.url,
                        TASKGATE_STOP_WEBHOOK_ATTEMPTS="3", TASKGATE_STOP_WEBHOOK_BACKOFF_S="0.05",
                        TASKGATE_STOP_WEBHOOK_TIMEOUT_S="8") as gw:
        yield gw
