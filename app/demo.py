"""``taskgate demo``: watch the loop guard stop a looping agent, in one command.

Starts three things on loopback: the scripted upstream answering every turn with the
same ``read_file`` tool call, a gateway on an embedded PostgreSQL in a temporary
directory (or on ``TASKGATE_DATABASE_URL``), and a small agent on the official
``openai`` SDK that executes each tool call and sends the result back. It prints the
story only: where the two servers are, every turn, the refusal the agent got, the task's
``stop_reason`` from the admin API and what upstream saw (README's transcript; a test
compares the two). ``verbose`` adds the gateway's log lines and the stop's
``stop_detail`` (hashes, thresholds, normalisers).
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import httpx
import uvicorn

from app.db import embedded
from app.main import create_app
from app.settings import Settings
from app.testing.upstream import UpstreamServer

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Gateway:
    """The gateway app under uvicorn in a background thread."""

    def __init__(self, settings: Settings, verbose: bool) -> None:
        config = uvicorn.Config(create_app(settings), host=settings.host, port=settings.port,
                                log_level="warning" if verbose else "error", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "_Gateway":
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise click.ClickException("the gateway did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


#: The refusal's continuation lines start under the text after ``turn  6: ``.
INDENT = " " * 9


def wrapped(line: str) -> str:
    """``line`` wrapped to the terminal (at most 100 columns), continuation lines indented
    under the turn's text."""
    width = min(100, shutil.get_terminal_size((100, 24)).columns)
    return textwrap.fill(line, width=max(width, 40), subsequent_indent=INDENT, break_on_hyphens=False)


def run_demo(max_turns: int = 20, tool_result: str = "", verbose: bool = False) -> dict[str, Any]:
    """Run the demo; returns the stopped task as the admin API shows it. Prints the story
    only, unless ``verbose``: then the gateway's log lines (INFO) and the stop's detail too."""
    try:
        import openai
    except ImportError:  # pragma: no cover - depends on the install
        raise click.ClickException("the demo's agent uses the openai SDK: pip install 'taskgate[demo]'") from None

    with tempfile.TemporaryDirectory(prefix="taskgate-demo-") as tmp, UpstreamServer() as upstream:
        upstream.script("tool_call", name="read_file", arguments={"path": "notes/todo.md"})
        settings = Settings(port=_free_port(), data_dir=Path(tmp), admin_token="tgadm-" + secrets.token_urlsafe(16),
                            upstream_base_url=upstream.base_url + "/v1", upstream_api_key="sk-demo-provider-key",
                            log_level="info" if verbose else "error")
        base = f"http://{settings.host}:{settings.port}"
        click.echo(f"upstream: a scripted model at {upstream.base_url} that always asks for read_file")
        with _Gateway(settings, verbose):
            admin = httpx.Client(base_url=base, headers={"authorization": f"Bearer {settings.admin_token}"})
            task = admin.post("/admin/tasks", json={"id": "demo-task", "request_limit": 100}).json()
            where = "embedded PostgreSQL in a temporary directory" if settings.database_url is None \
                else "TASKGATE_DATABASE_URL"
            click.echo(f"gateway:  {base}/v1 ({where})")
            click.echo(f"task:     {task['id']}, request_limit 100; "
                       "the agent runs each call and sends the result back\n")
            agent = openai.OpenAI(base_url=base + "/v1", api_key=task["token"], max_retries=0)
            messages: list[ChatCompletionMessageParam] = [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Summarise notes/todo.md"},
            ]
            tools: list[ChatCompletionToolParam] = [{"type": "function", "function": {
                "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
            for turn in range(1, max_turns + 1):
                try:
                    message = agent.chat.completions.create(model="mock-model", messages=messages,
                                                            tools=tools).choices[0].message
                except openai.BadRequestError as exc:
                    why = exc.body.get("message") if isinstance(exc.body, dict) else exc.body
                    click.secho(wrapped(f"turn {turn:2}: refused by taskgate (HTTP {exc.status_code}): {why}"),
                                fg="red")
                    break
                calls = message.tool_calls or []
                messages.append({"role": "assistant", "content": message.content, "tool_calls": [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in calls if c.type == "function"]})
                for call in calls:
                    if call.type != "function":  # the demo's tool is a function
                        continue
                    click.echo(f"turn {turn:2}: model calls {call.function.name}({call.function.arguments}) "
                               f"→ agent runs it → {tool_result!r}")
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_result})
            stopped: dict[str, Any] = admin.get(f"/admin/tasks/{task['id']}").json()
            click.echo(f"task {stopped['id']}: status={stopped['status']} stop_reason={stopped['stop_reason']} "
                       f"admitted_requests={stopped['admitted_requests']} tool_calls={stopped['tool_calls']}")
            if verbose:
                click.echo("stop_detail: " + json.dumps(stopped["stop_detail"], indent=2))
            click.echo(f"upstream saw {len([r for r in upstream.requests if r.method == 'POST'])} "
                       "requests; the one carrying the looping result never reached it.")
        if settings.database_url is None:
            embedded.stop(Path(tmp))
        return stopped
