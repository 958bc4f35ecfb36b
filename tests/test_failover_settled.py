"""tests.failover_load.settled waits for a settlement still in a gateway's backlog: one
whose next retry is further away than settled's poll (a backlogged settlement is retried
every ~2 s, up to 2.4 s, after a try that may itself run into the gateways' 2 s statement
timeout). Plain test database, no cluster."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

from app.db import commits
from tests.failover_load import rows, settled


async def test_settled_waits_for_an_admission_whose_settlement_is_still_retried(pool, database_url):
    task_id = f"fs-{uuid.uuid4().hex[:10]}"
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $1, 100)", task_id)
    key = commits.new_key()
    await pool.execute("INSERT INTO admissions (key, task_id) VALUES ($1, $2)", key, task_id)

    def retried_later() -> None:  # the backlog's next try, 4 s on (a 2 s timeout, then 2 s of backoff): it lands
        time.sleep(4.0)
        rows(database_url, "WITH m AS (UPDATE admissions SET settled_at = now() WHERE key = $1 RETURNING key)"
             " UPDATE tasks SET input_tokens = input_tokens + 22, output_tokens = output_tokens + 9"
             " WHERE id = $2 RETURNING id", key, task_id)

    later = threading.Thread(target=retried_later)
    later.start()
    try:
        await asyncio.get_running_loop().run_in_executor(None, lambda: settled(database_url, [task_id], timeout=20))
        row = await pool.fetchrow("SELECT input_tokens, output_tokens FROM tasks WHERE id = $1", task_id)
    finally:
        later.join()
    assert tuple(row) == (22, 9)  # settled returned after the settlement landed, not before
