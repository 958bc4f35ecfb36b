"""The LiteLLM proxy as the comparison path.

LiteLLM's database layer (virtual keys, per-key budgets and limits) needs Prisma
binaries fetched at run time, which an offline machine cannot do. So the proxy runs
from a config file with a master key and no database, with the limits it does
enforce without one, all set high enough never to refuse the benchmark's load (as
taskgate's tasks are):

- ``general_settings.global_max_parallel_requests`` (proxy-wide in-flight cap,
  checked per request by its parallel-request limiter);
- per deployment ``rpm`` with ``router_settings.enable_pre_call_checks`` (requests
  per minute, counted in memory per deployment) and ``max_parallel_requests``.

These are in-memory, per-process counters: unlike taskgate's admission they are not
durable, not shared between processes and do not serialise on a database row.

Where LiteLLM comes from: the interpreter named by ``--litellm-python`` or the
``TASKGATE_BENCH_LITELLM_PYTHON`` variable (only that one); otherwise
``bench/.venv-litellm`` (made by ``python -m bench --setup-litellm``), then the
running interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.services import Service, child_env, wait_http

BENCH_DIR = Path(__file__).resolve().parent
LOCAL_VENV = BENCH_DIR / ".venv-litellm"
MASTER_KEY = "sk-bench-master"
HIGH_LIMIT = 10_000_000
"""rpm / parallel limits: enforced on every request, never reached."""


def find_python(explicit: str | None = None) -> tuple[str | None, str]:
    """An interpreter that can run the LiteLLM proxy, and how it was found (or why
    none was)."""
    candidates: list[tuple[str, str]] = []
    if explicit:  # a named interpreter is the only candidate
        candidates.append((explicit, "--litellm-python"))
    elif os.environ.get("TASKGATE_BENCH_LITELLM_PYTHON"):
        candidates.append((os.environ["TASKGATE_BENCH_LITELLM_PYTHON"], "TASKGATE_BENCH_LITELLM_PYTHON"))
    else:
        candidates.append((str(LOCAL_VENV / "bin" / "python"), "bench/.venv-litellm"))
        candidates.append((sys.executable, "this interpreter"))
    reasons = []
    for python, origin in candidates:
        if not Path(python).exists():
            reasons.append(f"{origin}: no interpreter at {python}")
            continue
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60,
                               env=child_env(False))
        if probe.returncode == 0:
            return python, f"litellm {probe.stdout.strip()} ({origin})"
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        reasons.append(f"{origin}: {last[:160]}")
    return None, "LiteLLM proxy not installed (" + "; ".join(reasons) + \
        "); install it with `python -m bench --setup-litellm` or `pip install 'litellm[proxy]'`"


_PROBE = """
import importlib.metadata as m, importlib.util as u
d = m.distribution('litellm')
assert d.locate_file('litellm/proxy/proxy_cli.py').exists(), 'litellm has no proxy'
missing = [x for x in ('backoff', 'fastapi', 'uvicorn', 'yaml', 'orjson', 'apscheduler') if u.find_spec(x) is None]
assert not missing, 'litellm[proxy] extras missing: ' + ', '.join(missing)
print(d.version)
"""


def setup_venv() -> int:
    """Create ``bench/.venv-litellm`` with ``litellm[proxy]`` (kept apart from the
    project's venv: LiteLLM pins older ``websockets`` and ``rich``)."""
    import venv

    if not (LOCAL_VENV / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True).create(LOCAL_VENV)
    return subprocess.call([str(LOCAL_VENV / "bin" / "python"), "-m", "pip", "install", "litellm[proxy]",
                            "uvicorn[standard]"])


def write_config(path: Path, upstream_url: str, models: list[str]) -> None:
    """A LiteLLM proxy config routing each bench model name to the upstream."""
    lines = ["model_list:"]
    for m in models:
        lines += [
            f"  - model_name: {m}",
            "    litellm_params:",
            f"      model: openai/{m}",
            f"      api_base: {upstream_url}/v1",
            "      api_key: x",
            f"      rpm: {HIGH_LIMIT}",
            f"      max_parallel_requests: {HIGH_LIMIT}",
        ]
    lines += [
        "router_settings:",
        "  enable_pre_call_checks: true",
        "  num_retries: 0",
        "general_settings:",
        f"  master_key: {MASTER_KEY}",
        f"  global_max_parallel_requests: {HIGH_LIMIT}",
        "litellm_settings:",
        "  set_verbose: false",
        "  request_timeout: 600",
    ]
    path.write_text("\n".join(lines) + "\n")


def command(python: str, config: Path, port: int) -> list[str]:
    """The proxy's command line: one worker, loopback only."""
    return [python, "-c", "from litellm.proxy.proxy_cli import run_server; run_server()",
            "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]


def environment() -> dict[str, str]:
    """No network at start-up (local model cost map), quiet logs, no ``.env``; the
    upstream connection caps raised from 1,000 / 500 per host to 2,000 (at 500 per
    host LiteLLM cannot hold the memory figure's 1,000 streams; taskgate's
    ``upstream_max_connections`` is 1,000)."""
    return child_env(False, LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR",
                     LITELLM_MODE="PRODUCTION", DISABLE_ADMIN_UI="True", NO_DOCS="True",
                     AIOHTTP_CONNECTOR_LIMIT="2000", AIOHTTP_CONNECTOR_LIMIT_PER_HOST="2000")


def wait_ready(svc: Service, timeout_s: float = 180) -> None:
    """Wait until ``/health/liveliness`` answers. Raises
    :class:`bench.services.Unavailable`."""
    wait_http(svc, "/health/liveliness", timeout_s)


LIMITS_NOTE = (
    "LiteLLM runs without a database (its Prisma binaries cannot be fetched offline): master key, "
    f"in-memory limits only (global_max_parallel_requests, per-deployment rpm and max_parallel_requests, "
    f"all {HIGH_LIMIT:,}, pre-call checks on); nothing durable, nothing shared between processes. "
    "Upstream connection caps raised to 2,000 (AIOHTTP_CONNECTOR_LIMIT[_PER_HOST]; the default 500 per host "
    "stops it at 500 open streams)."
)
