"""A small MCP server for the MCP demo (``taskgate demo --mcp``): streamable HTTP, written
with the official ``mcp`` SDK (``pip install 'taskgate[demo]'``), one tool, ``grep``,
that never finds anything, and a count of the calls it ran. In a thread of the caller's
process under uvicorn (:class:`McpServerThread`)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class McpServerThread:
    """The server on a free loopback port; ``url`` is its MCP endpoint, ``calls`` how many
    ``tools/call`` it ran."""

    def __init__(self) -> None:
        from mcp.server.mcpserver import MCPServer

        self.calls = 0
        server = MCPServer("taskgate-demo-tools", log_level="ERROR")  # it configures logging

        @server.tool()
        def grep(pattern: str, path: str = ".") -> str:
            """Search the files under ``path`` for ``pattern``."""
            self.calls += 1
            return ""

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=self.port,
                                log_level="error", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "McpServerThread":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the demo's MCP server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
