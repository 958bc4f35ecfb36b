"""A real MCP server for the MCP gateway's tests, written with the official ``mcp`` SDK and
served over streamable HTTP by uvicorn in its own process (:class:`McpFixture`).

Tools: ``grep`` (always the same empty result: what a stuck agent loops on), ``count``
(a different result every call), ``fail`` (raises: an ``isError`` result), ``slow`` (sleeps
the seconds it is given), ``big`` (a result of the size it is given). The server counts
the ``tools/call`` requests it ran per tool; ``GET /calls`` reads the counts, outside MCP,
so that a test can tell what reached the server.

Run: ``python -m tests.mcp_fixture PORT``.
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
import time

import httpx

from tests.support import free_port

CALLS: collections.Counter[str] = collections.Counter()


def build_app():  # type: ignore[no-untyped-def]
    from mcp.server.mcpserver import MCPServer
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    server = MCPServer("taskgate-fixture")

    @server.tool()
    def grep(pattern: str) -> str:
        """Search the files for a pattern."""
        CALLS["grep"] += 1
        return ""

    @server.tool()
    def count() -> str:
        """A new number every call."""
        CALLS["count"] += 1
        return f"call {CALLS['count']}"

    @server.tool()
    def fail(path: str) -> str:
        """Always fails."""
        CALLS["fail"] += 1
        raise PermissionError(f"permission denied: {path}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after ``seconds``."""
        CALLS["slow"] += 1
        await asyncio.sleep(seconds)
        CALLS["slow_done"] += 1  # not reached when the request was cancelled
        return "done"

    @server.tool()
    def big(chars: int) -> str:
        """A result of ``chars`` characters."""
        CALLS["big"] += 1
        return "x" * chars

    @server.custom_route("/calls", methods=["GET"])
    async def calls(request: Request) -> JSONResponse:
        return JSONResponse(dict(CALLS))

    return server.streamable_http_app()


class McpFixture:
    """The fixture server in a subprocess on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def calls(self) -> dict[str, int]:
        counts: dict[str, int] = httpx.get(f"http://127.0.0.1:{self.port}/calls", timeout=5).json()
        return counts

    def __enter__(self) -> "McpFixture":
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.mcp_fixture", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.calls()
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the MCP fixture server did not start")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(build_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
