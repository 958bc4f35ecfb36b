"""The Portkey AI gateway (``@portkey-ai/gateway``, Node) as a comparison path.

``python -m bench --setup-portkey`` installs the npm package into
``bench/.portkey`` (ignored by git); the suite runs its ``build/start-server.js``
with the ``node`` on ``PATH``, headless, one process. Portkey is a stateless
relay: no database, no per-task state. Each request names its provider and where
that provider lives in headers (``x-portkey-provider: openai`` and
``x-portkey-custom-host: <bench upstream>/v1``); the client's bearer token is
passed upstream as the provider key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from bench.services import Service, child_env, free_port, spawn, wait_http

BENCH_DIR = Path(__file__).resolve().parent
PREFIX = BENCH_DIR / ".portkey"
PACKAGE = "@portkey-ai/gateway"
SERVER = PREFIX / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"

STREAMS_NOTE = (
    "Portkey runs the non-streaming figures only: its streamed answers fail on this machine "
    "(`TypeError: immutable` in its `updateHeaders`, answered as HTTP 500 'Something went wrong', "
    "on Node 20 and 22)."
)


def setup() -> int:
    """``npm install @portkey-ai/gateway`` into ``bench/.portkey``."""
    if shutil.which("npm") is None:
        print("npm not found: install Node.js (it brings npm) first")
        return 1
    PREFIX.mkdir(exist_ok=True)
    return subprocess.call(["npm", "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund", PACKAGE])


def find() -> tuple[str | None, str]:
    """The ``node`` binary and a description (``portkey X on node Y``), or ``None``
    and why Portkey cannot run."""
    node = shutil.which("node")
    if node is None:
        return None, "node not found on PATH"
    if not SERVER.exists():
        return None, f"{PACKAGE} not installed (run `python -m bench --setup-portkey`)"
    meta = json.loads((SERVER.parent.parent / "package.json").read_text())
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
    return node, f"{PACKAGE} {meta.get('version', '?')} on node {version}"


def start(node: str, log_dir: Path, name: str = "portkey") -> Service:
    """Start the gateway on a free port and wait until it answers. Raises
    :class:`bench.services.Unavailable`."""
    port = free_port()
    svc = spawn(name, [node, str(SERVER), f"--port={port}", "--headless"], port, log_dir,
                child_env(False, NODE_ENV="production"))
    wait_http(svc, "/", 60)
    return svc


def headers(upstream: Service) -> dict[str, str]:
    """The routing headers every request to Portkey carries."""
    return {"x-portkey-provider": "openai", "x-portkey-custom-host": f"{upstream.url}/v1"}
