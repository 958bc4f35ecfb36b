"""A published stdio MCP server (``mcp-server-time`` from PyPI) behind streamable HTTP, for
the MCP gateway's tests: the official SDK's stdio client runs the server as a subprocess,
and the SDK's low-level server answers ``tools/list`` and ``tools/call`` over HTTP with
what it says. The gateway relays HTTP MCP servers; this is how an operator puts a stdio
server behind it (docs/mcp.md).

Run: ``python -m tests.mcp_stdio_bridge PORT COMMAND [ARG...]``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


def build_app(command: list[str]) -> Any:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.server.lowlevel import Server

    clients: list[Client] = []

    @asynccontextmanager
    async def lifespan(server: Any) -> AsyncIterator[dict[str, Any]]:
        async with Client(StdioServerParameters(command=command[0], args=command[1:]), mode="legacy") as client:
            clients.append(client)
            yield {}
            clients.remove(client)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return await clients[-1].list_tools()

    async def call_tool(ctx: Any, params: Any) -> Any:
        return await clients[-1].call_tool(params.name, params.arguments or {})

    server = Server("stdio-bridge", lifespan=lifespan, on_list_tools=list_tools, on_call_tool=call_tool)
    return server.streamable_http_app()


class StdioBridge:
    """The bridge in a subprocess on a free loopback port, running ``command``."""

    def __init__(self, *command: str) -> None:
        from tests.support import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "StdioBridge":
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.mcp_stdio_bridge", str(self.port), *self.command],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the stdio bridge did not start")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(build_app(sys.argv[2:]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
