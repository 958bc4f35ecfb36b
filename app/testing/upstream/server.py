"""Running the mock upstream: :class:`UpstreamServer` (a background thread) and the CLI."""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import uvicorn

from .app import UpstreamApp
from .exchange import RecordedRequest, install_log_filter
from .scenarios import ALIASES, SCENARIOS, Script, make_script

T = TypeVar("T")

class _Server(uvicorn.Server):
    """uvicorn, but shutdown first aborts responses that are pausing (stalls, heartbeats),
    which would otherwise hold the graceful shutdown for their full duration."""

    def __init__(self, config: uvicorn.Config, app: UpstreamApp) -> None:
        super().__init__(config)
        self.upstream_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.upstream_app.set_closing()
        await super().shutdown(sockets)


class UpstreamServer:
    """Runs :class:`UpstreamApp` under uvicorn in a background thread.

    Use as a context manager or call :meth:`start` / :meth:`stop`. ``port=0`` picks a
    free port; :attr:`base_url` is known once started (``http://HOST:PORT``, without
    ``/v1``). Scripting and inspection delegate to the app.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        scenario: str = "text",
        log_level: str = "warning",
        max_recorded: int | None = None,
        **params: Any,
    ) -> None:
        self.host = host
        self.port = port
        self.log_level = log_level
        self.app = UpstreamApp(make_script(scenario, params), max_recorded=max_recorded)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 10.0) -> UpstreamServer:
        if self._thread is not None:
            return self
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
        )
        install_log_filter()
        self._server = _Server(config, self.app)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"upstream:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("mock upstream failed to start")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        self._server = None
        self._thread = None

    def __enter__(self) -> UpstreamServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- delegation

    def script(self, scenario: str, **params: Any) -> Script:
        """Set the default behaviour. See the module docstring for scenarios."""
        return self.app.script(scenario, **params)

    def reset(self) -> None:
        """Forget recorded requests and go back to the default ``text`` script."""
        self.app.reset()

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.app.requests

    @property
    def disconnects(self) -> list[RecordedRequest]:
        return self.app.disconnects

    @property
    def open_streams(self) -> int:
        return self.app.open_streams

    @property
    def open_requests(self) -> int:
        return self.app.open_requests

    def wait_for(self, predicate: Callable[[], T], timeout: float = 2.0, interval: float = 0.005) -> T:
        """Poll ``predicate`` until it returns something truthy and return that.

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            time.sleep(interval)


# ----------------------------------------------------------------------------- CLI


def _param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


def main(argv: list[str] | None = None, prog: str = "python -m app.testing.upstream") -> None:
    """``python -m app.testing.upstream`` (or ``taskgate upstream``, which passes its own
    ``prog``): serve the mock upstream until interrupted."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Scripted fake OpenAI/Anthropic upstream for taskgate tests, demos and benchmarks.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument(
        "--scenario", default="text",
        help=f"what it answers (docs/mock-upstream.md), one of: {', '.join(sorted([*SCENARIOS, *ALIASES]))}"
             " (default text)"
    )
    parser.add_argument(
        "--param", "-p", action="append", type=_param, default=[], metavar="KEY=VALUE",
        help="scenario param; VALUE is parsed as JSON when it can be (repeatable)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--access-log", action="store_true", help="log every request (slower)")
    parser.add_argument("--max-recorded", type=int, default=10_000, help="requests kept for /_upstream/requests")
    args = parser.parse_args(argv)
    try:
        script = make_script(args.scenario, dict(args.param))
    except ValueError as exc:
        parser.error(str(exc))
    app = UpstreamApp(script, max_recorded=args.max_recorded)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    install_log_filter()
    server = _Server(config, app)
    print(f"taskgate mock upstream: http://{args.host}:{args.port}/v1  scenario={script.scenario} {script.params}")
    server.run()


