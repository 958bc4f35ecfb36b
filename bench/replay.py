"""Replay recorded agent runs through a real gateway and say where the loop guard stops
each one: ``python -m bench.replay [FILE ...]`` (default: every run in bench/recordings).

For each run: a task at default settings, then request after request as the agent sent
them (:mod:`bench.recording`), through the gateway, to a scripted upstream that answers
request *k* with the recording's turn *k* (streamed or whole, as recorded). The client
sends its next request as soon as it has read the answer, as agents do. Printed per run:
the turn the task was stopped at and why (the admin API's ``stop_reason``), the turns
whose answer the gateway cut or refused, and whether that is what the recording expects.

The gateway runs on an embedded PostgreSQL in a temporary directory, or on the server
named by ``--database-url`` (a fresh database beside it). Exit status 1 when a run
differs from its ``expect``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from bench.recording import Recording, completion, load, messages, stream_events, turn_of
from bench.services import ADMIN_TOKEN, embedded_database, free_port, server_database, start_gateway

RECORDINGS = Path(__file__).resolve().parent / "recordings"
MODEL_PREFIX = "replay-"


class ReplayUpstream:
    """A loopback provider answering each request from the recording its ``model`` names
    (``replay-<run>``), at the turn the request has reached (:func:`bench.recording.turn_of`)."""

    def __init__(self, recordings: list[Recording]) -> None:
        self.recordings = {MODEL_PREFIX + r.name: r for r in recordings}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self._app, host="127.0.0.1", port=self.port, log_level="error", access_log=False,
                                interface="asgi3")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body or b"{}")
        recording = self.recordings.get(str(request.get("model")))
        turn = turn_of(request)
        if scope["path"] == "/healthz":
            await _send(send, 200, b'{"ok": true}', "application/json")
        elif recording is None or not 1 <= turn <= len(recording.turns):
            await _send(send, 404, b'{"error": {"message": "no such recording or turn"}}', "application/json")
        elif request.get("stream"):
            include = bool((request.get("stream_options") or {}).get("include_usage"))
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            for event in stream_events(recording.turns[turn - 1], request["model"], include):
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            await _send(send, 200, completion(recording.turns[turn - 1], request["model"]), "application/json")

    def __enter__(self) -> "ReplayUpstream":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the replay upstream did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


async def _send(send: Any, status: int, body: bytes, content_type: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode())]})
    await send({"type": "http.response.body", "body": body})


@dataclass
class Replayed:
    """What happened to one run: the turn it was stopped at (``None``: never) and why,
    and the turns whose answer the gateway cut (a stream's error event) or refused."""

    run: str
    stop_turn: int | None = None
    stop_reason: str | None = None
    cut_turns: list[int] = field(default_factory=list)
    turns_sent: int = 0

    def differs_from(self, expect: dict[str, Any]) -> list[str]:
        """What differs from the recording's ``expect`` (``[]``: as expected)."""
        out = []
        if self.stop_turn != expect.get("stop_turn"):
            out.append(f"stopped at turn {self.stop_turn}, expected {expect.get('stop_turn')}")
        if expect.get("stop_turn") is not None and self.stop_reason != expect.get("stop_reason"):
            out.append(f"stop reason {self.stop_reason}, expected {expect.get('stop_reason')}")
        unexpected = sorted(set(self.cut_turns) - set(expect.get("repeated_output_turns") or []))
        if unexpected:
            out.append(f"answers cut or refused at turns {unexpected}, which do not repeat themselves")
        return out


def _stream_was_cut(response: httpx.Response) -> bool:
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            event = json.loads(line[5:])
            if isinstance(event, dict) and "error" in event:
                return True
    return False


def _error_type(response: httpx.Response) -> str | None:
    try:
        error = response.json().get("error")
    except ValueError:
        return None
    return error.get("type") if isinstance(error, dict) else None


def _request_id(run: str, k: int) -> str:
    return f"replay.{run}.{k}"


def _latched_turn(events: list[dict[str, Any]], run: str) -> int | None:
    """The turn whose request latched the task (its ``stopped`` event names the request)."""
    for event in events:
        request_id = str((event.get("detail") or {}).get("request_id") or "")
        if event.get("kind") == "stopped" and request_id.startswith(f"replay.{run}."):
            return int(request_id.rsplit(".", 1)[1])
    return None


def replay(gateway_url: str, recording: Recording, http: httpx.Client, admin_token: str = ADMIN_TOKEN) -> Replayed:
    """Replay ``recording`` on a new task of the gateway at ``gateway_url`` (whose admin
    token is ``admin_token``). The stop turn is the turn whose request set the latch (its
    admission, or its answer's judgement), else the first turn refused as stopped."""
    admin = {"authorization": f"Bearer {admin_token}"}
    created = http.post(gateway_url + "/admin/tasks", headers=admin, json={"metadata": {"replay": recording.name}})
    created.raise_for_status()
    task_id, token = created.json()["id"], created.json()["token"]
    out = Replayed(recording.name)
    refused_at = None
    for k, turn in enumerate(recording.turns, 1):
        body: dict[str, Any] = {"model": MODEL_PREFIX + recording.name, "messages": messages(recording, k)}
        if turn.get("stream"):
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        out.turns_sent = k
        headers = {"authorization": f"Bearer {token}", "x-request-id": _request_id(recording.name, k)}
        with http.stream("POST", gateway_url + "/v1/chat/completions", json=body, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                if _error_type(response) == "task_stopped":
                    refused_at = k
                    break
                out.cut_turns.append(k)  # this answer refused, the task goes on
            elif not turn.get("stream"):
                response.read()
            elif _stream_was_cut(response):
                out.cut_turns.append(k)
    task = http.get(f"{gateway_url}/admin/tasks/{task_id}", headers=admin).json()
    if task["status"] == "stopped":
        events = http.get(f"{gateway_url}/admin/tasks/{task_id}/events", headers=admin).json()["data"]
        out.stop_turn = _latched_turn(events, recording.name) or refused_at
        out.stop_reason = task.get("stop_reason")
    return out


def replay_all(gateway_url: str, recordings: list[Recording], admin_token: str = ADMIN_TOKEN) -> list[Replayed]:
    """Each recording replayed in turn on a task of its own."""
    with httpx.Client(timeout=60) as http:
        return [replay(gateway_url, r, http, admin_token) for r in recordings]


def _line(result: Replayed, expect: dict[str, Any]) -> str:
    stop = f"stopped at turn {result.stop_turn} ({result.stop_reason})" if result.stop_turn else "never stopped"
    cut = f", answers cut or refused at turns {result.cut_turns}" if result.cut_turns else ""
    verdict = "as expected" if not result.differs_from(expect) else "; ".join(result.differs_from(expect))
    return f"{result.run}: {result.turns_sent} turns, {stop}{cut} -- {verdict}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="taskgate-run/1 files (default: bench/recordings)")
    parser.add_argument("--database-url", help="a PostgreSQL server (a fresh database is made beside it)")
    args = parser.parse_args(argv)
    recordings = [load(p) for p in (args.files or sorted(RECORDINGS.glob("*.jsonl")))]
    with tempfile.TemporaryDirectory(prefix="taskgate-replay-") as tmp, ReplayUpstream(recordings) as upstream:
        database = server_database(args.database_url) if args.database_url else embedded_database(Path(tmp) / "db")
        with database as url:
            gateway = start_gateway("replay-gateway", url, upstream, Path(tmp))
            try:
                results = replay_all(gateway.url, recordings)
            finally:
                gateway.stop()
    for recording, result in zip(recordings, results):
        print(_line(result, recording.expect))
    return 1 if any(r.differs_from(rec.expect) for rec, r in zip(recordings, results)) else 0


if __name__ == "__main__":
    sys.exit(main())
