"""The admin API against its own OpenAPI document: schemathesis, every check, 0 failures.

schemathesis's CLI runs in a subprocess against a real gateway process on a database of
its own (it creates, stops and deletes tasks at will), with the admin bearer token.
Deterministic: a fixed seed, no example database, one worker, bounded examples. The hooks
module teaches it the ``python-regex`` string format.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import ADMIN_TOKEN, GatewayProcess, fresh_database

MAX_EXAMPLES = 30
SEED = 20261201


@pytest.mark.timeout(600)
def test_admin_api_passes_schemathesis_with_all_checks(upstream) -> None:
    with fresh_database() as url, GatewayProcess(url, upstream.base_url) as gw, \
            tempfile.TemporaryDirectory(prefix="taskgate-st-") as tmp:
        cmd = [sys.executable, "-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
               "run", gw.url + "/openapi.json", "--checks", "all",
               "--header", f"Authorization: Bearer {ADMIN_TOKEN}",
               "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--workers", "1",
               "--generation-database", "none", "--no-color", "--request-timeout", "30",
               "--report", "junit", "--report-dir", tmp]
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=tmp, env=env)
        tail = run.stdout[-6000:] + run.stderr[-2000:]
        assert run.returncode == 0, tail
        assert " generated, " in run.stdout and "failures" not in run.stdout.splitlines()[-1], tail
        log = gw.output()
    assert "Traceback" not in log and "internal error" not in log, log[-4000:]
