"""``taskgate demo --mcp``: watch the MCP gateway stop an agent looping on a tool.

Starts on loopback: an MCP server whose ``grep`` never finds anything
(:mod:`app.testing.mcp_server`), the scripted upstream, and a gateway on an embedded
PostgreSQL in a temporary directory (or on ``TASKGATE_DATABASE_URL``) with the server
configured as ``/mcp/tools``. An agent on the official ``mcp`` SDK calls ``grep`` through
the gateway with its task token until it is refused, then tries one model call with the
same token. Prints the story only (``verbose``: the gateway's log lines and the stop's
detail too).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
from pathlib import Path
from typing import Any

import click
import httpx

from app.db import embedded
from app.demo import _free_port, _Gateway, wrapped
from app.settings import Settings
from app.testing.upstream import UpstreamServer

_CONFIG = """providers:
  main: {{kind: openai, base_url: "{upstream}/v1", api_key: sk-demo-provider-key}}
models:
  - {{name: "*", provider: main}}
mcp_servers:
  - {{name: tools, url: "{mcp}"}}
"""
ARGUMENTS = {"pattern": "TODO", "path": "src"}


async def _agent(url: str, token: str, max_calls: int) -> list[str]:
    """The agent's calls of ``grep`` through the gateway, one line each, up to the refusal."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    lines = []
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
    async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
        for call in range(1, max_calls + 1):
            try:
                result = await client.call_tool("grep", ARGUMENTS)
            except MCPError as exc:
                lines.append(f"call {call:2}: refused by taskgate (JSON-RPC {exc.error.code}): {exc.error.message}")
                break
            text = "".join(getattr(part, "text", "") for part in result.content)
            lines.append(f"call {call:2}: grep({json.dumps(ARGUMENTS)}) → {text!r}")
    return lines


def run_mcp_demo(max_calls: int = 20, verbose: bool = False) -> dict[str, Any]:
    """Run the demo; returns the stopped task as the admin API shows it."""
    try:
        import openai

        from app.testing.mcp_server import McpServerThread
    except ImportError:  # pragma: no cover - depends on the install
        raise click.ClickException("the MCP demo uses the mcp and openai SDKs: pip install 'taskgate[demo]'") from None

    with tempfile.TemporaryDirectory(prefix="taskgate-demo-") as tmp, UpstreamServer() as upstream, \
            McpServerThread() as tools:
        config = Path(tmp) / "taskgate.yaml"
        config.write_text(_CONFIG.format(upstream=upstream.base_url, mcp=tools.url))
        settings = Settings(port=_free_port(), data_dir=Path(tmp), admin_token="tgadm-" + secrets.token_urlsafe(16),
                            config=config, log_level="info" if verbose else "error")
        base = f"http://{settings.host}:{settings.port}"
        click.echo(f"MCP server: {tools.url}, a grep that never finds anything")
        with _Gateway(settings, verbose):
            admin = httpx.Client(base_url=base, headers={"authorization": f"Bearer {settings.admin_token}"})
            task = admin.post("/admin/tasks", json={"id": "demo-mcp-task", "request_limit": 100}).json()
            click.echo(f"gateway:    {base}/mcp/tools relays it; model calls at {base}/v1")
            click.echo(f"task:       {task['id']}; the agent calls grep through the gateway with its task token\n")
            for line in asyncio.run(_agent(f"{base}/mcp/tools", task["token"], max_calls)):
                click.secho(wrapped(line), fg="red" if "refused" in line else None)
            model = openai.OpenAI(base_url=base + "/v1", api_key=task["token"], max_retries=0)
            try:
                model.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "go on"}])
                click.echo("model call: answered")
            except openai.BadRequestError as exc:
                click.secho(f"model call: refused too (HTTP {exc.status_code}): one latch for tools and tokens",
                            fg="red")
            stopped = admin.get(f"/admin/tasks/{task['id']}").json()
            click.echo(f"task {stopped['id']}: status={stopped['status']} stop_reason={stopped['stop_reason']} "
                       f"tool_calls={stopped['tool_calls']}")
            if verbose:
                click.echo("stop_detail: " + json.dumps(stopped["stop_detail"], indent=2))
            click.echo(f"MCP server ran {tools.calls} calls; the refused one never reached it.")
        if settings.database_url is None:
            embedded.stop(Path(tmp))
        return dict(stopped)
