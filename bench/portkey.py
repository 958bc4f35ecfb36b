"""The Portkey AI gateway (``@portkey-ai/gateway``, Node) as a comparison path.

``python -m bench --setup-portkey`` installs the npm package into
``bench/.portkey`` (ignored by git); the suite runs its ``build/start-server.js``
with the ``node`` on ``PATH``, headless, one process.

The install pins ``@hono/node-server`` (Portkey's HTTP adapter, declared as
``^1.3.3``) to :data:`HONO_NODE_SERVER` with an npm ``overrides`` entry. From
1.14.2 on, the adapter's lightweight ``Response`` keeps the ``Headers`` object of
the ``init`` it is given; Portkey builds its streamed answer as
``new Response(stream, upstreamFetchResponse)`` and then appends its
``x-portkey-*`` headers to it, and a fetch response's headers are immutable
under undici: ``TypeError: immutable`` in ``updateHeaders``, HTTP 500 for every
stream. 1.14.1 copies the headers into a plain object instead, so streams work
(Portkey's own source is unchanged). Portkey is a stateless
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

HONO_NODE_SERVER = "1.14.1"
"""The newest ``@hono/node-server`` under which Portkey's streams work (see above)."""

STREAMS_NOTE = (
    f"Portkey runs with `@hono/node-server` pinned to {HONO_NODE_SERVER} (npm `overrides`): with 1.14.2 and "
    "later its streamed answers fail (`TypeError: immutable` in its `updateHeaders`, HTTP 500), because the "
    "adapter's `Response` keeps the upstream fetch response's immutable `Headers`. Portkey holds back the first "
    "event of every stream 25 ms (a `setTimeout` in its stream reader), which its TTFB and totals include."
)


def setup() -> int:
    """``npm install @portkey-ai/gateway`` into ``bench/.portkey``."""
    if shutil.which("npm") is None:
        print("npm not found: install Node.js (it brings npm) first")
        return 1
    PREFIX.mkdir(exist_ok=True)
    manifest = PREFIX / "package.json"
    meta = json.loads(manifest.read_text()) if manifest.exists() else {"private": True}
    meta.setdefault("overrides", {})["@hono/node-server"] = HONO_NODE_SERVER
    manifest.write_text(json.dumps(meta, indent=2) + "\n")
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
    adapter = PREFIX / "node_modules" / "@hono" / "node-server" / "package.json"
    hono = json.loads(adapter.read_text()).get("version", "?") if adapter.exists() else "?"
    if hono != HONO_NODE_SERVER:
        return None, (f"{PACKAGE} is installed with @hono/node-server {hono}, whose streams fail "
                      f"(run `python -m bench --setup-portkey` again to pin {HONO_NODE_SERVER})")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
    return node, f"{PACKAGE} {meta.get('version', '?')} (@hono/node-server {hono}) on node {version}"


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
