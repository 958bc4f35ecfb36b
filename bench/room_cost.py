"""What the remaining-allowance headers (issue 38 item 2) cost a budgeted admission.

The escrow fast statement of a one-budget chain (``app.budgets.escrow.FAST_ONE_BY_TOKEN``)
with its room columns (``app.budgets.room.ROOM_RETURNING``, ``ROOM_ARRAYS``), against the same
statement without them, serially on one connection to a private embedded PostgreSQL: PostgreSQL backend CPU
per admission (``/proc/<pid>/stat`` of the backend) and wall time, the two alternating
``--rounds`` times over ``--n`` admissions each. The budget's window holds ``--leases``
leases of other holders (near the limit, ``--near``, the room sums their ``spent``). Also the gateway's Python work
per response for the headers (``room.of_fast_row``, ``room.of_task``, ``room.headers``).

Run as ``python -m bench.room_cost [--n 3000] [--rounds 3] [--leases 40] [--near]``; prints one
JSON line per variant and round, then the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import timeit
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.services import embedded_database

_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


async def _run(url: str, n: int, rounds: int, leases: int, near: bool) -> dict[str, Any]:
    import asyncpg

    from app.admission.tokens import token_hash
    from app.budgets import escrow, room
    from app.db.pool import asyncpg_dsn

    def words(text: str) -> str:  # the statement's file and the fragments wrap lines differently
        return " ".join(text.split())

    new = escrow.FAST_ONE_BY_TOKEN
    old = words(new)  # the statement as it was before the room columns
    for added in (room.ROOM_RETURNING, room.ROOM_ARRAYS.format(order="array_position($5::text[], budget_id)"),
                  ", budget_windows w", " AND w.budget_id = l.budget_id AND w.window_start = l.window_start"):
        assert words(added) in old, added
        old = old.replace(words(added), "" if added.startswith(",") else " ")
    assert "room_" not in old
    conn = await asyncpg.connect(asyncpg_dsn(url))
    for kind in ("json", "jsonb"):  # as the gateway's pool decodes them
        await conn.set_type_codec(kind, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    try:
        hashed = token_hash("tg-bench-room")
        start = datetime(1970, 1, 1, tzinfo=timezone.utc)
        limit = 2 * 10**8 if near else 10**12  # near: the leases hold over 10 % of what is left (the exact sum)
        await conn.execute("INSERT INTO budgets (id, request_limit) VALUES ('room', $1)", limit)
        await conn.execute("INSERT INTO tasks (id, token_hash, request_limit, budget_id)"
                           " VALUES ('room-task', $1, 1000000000000, 'room')", hashed)
        await conn.execute("INSERT INTO budget_windows (budget_id, window_start, leased_requests)"
                           " VALUES ('room', $1, $2)", start, 10**8 + 256 * leases)
        await conn.executemany(
            "INSERT INTO budget_leases (holder, budget_id, window_start, granted, spent, request_limit, expires_at)"
            " VALUES ($1, 'room', $2, $3, $4, $5, now() + interval '1 day')",
            [("bench:me", start, 10**8, 0, limit)] + [(f"bench:other:{i}", start, 256, 100, limit)
                                                       for i in range(leases)])
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        at = datetime.now(timezone.utc)
        out: dict[str, list[tuple[float, float]]] = {"without room": [], "with room": []}
        row = None
        for statement in (old, new):  # warm up: plans cached
            for _ in range(200):
                row = await conn.fetchrow(statement, hashed, "bench:me", at, "room", ["room"], uuid.uuid4(), None)
        for r in range(rounds):
            for name, statement in (("without room", old), ("with room", new)):
                cpu, wall = _cpu_s(pid), time.perf_counter()
                for _ in range(n):
                    row = await conn.fetchrow(statement, hashed, "bench:me", at, "room", ["room"], uuid.uuid4(),
                                              None)
                used = ((_cpu_s(pid) - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)
                out[name].append(used)
                print(json.dumps({"round": r + 1, "variant": name, "pg_cpu_us": round(used[0], 1),
                                  "wall_us": round(used[1], 1)}), flush=True)
        assert row is not None and row["room_requests"] is not None
        from app.task import Task

        task = Task.from_row(row)
        python_us = timeit.timeit(lambda: room.headers(room.of_task(task), room.of_fast_row(row)), number=20000) \
            / 20000 * 1e6
        return {name: {"pg_cpu_us": round(statistics.median(v[0] for v in values), 1),
                       "wall_us": round(statistics.median(v[1] for v in values), 1)} for name, values in out.items()} \
            | {"python_headers_us": round(python_us, 2), "leases": leases, "near": near, "n": n, "rounds": rounds}
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="admissions per variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--leases", type=int, default=40, help="other holders' leases in the window")
    parser.add_argument("--near", action="store_true", help="a window near its limit: the exact figure, every "
                        "lease's spent summed (else what no gateway holds set aside plus this lease's own)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskgate-room-") as tmp, embedded_database(Path(tmp)) as url:
        print(json.dumps({"medians": asyncio.run(_run(url, args.n, args.rounds, args.leases, args.near))}))


if __name__ == "__main__":
    main()
