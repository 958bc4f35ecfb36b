"""``python -m bench.failover``: the long form of the failover test (issue 37 §4).

A highly available PostgreSQL on this machine (pg_auto_failover: monitor, primary,
synchronous standby; ``tests/ha.py``, with the monitor's default health-check timing),
three gateway processes on its multi-host URL, and a steady load of admissions,
settlements and budget spends on tasks with tight ceilings (``tests/failover_load.py``).
Each round of each case faults the database once under that load, waits until every
gateway serves again, and audits the ledger:

- ``kill_postmaster``: ``kill -9`` of the primary's postmaster (its keeper restarts it; the
  monitor fails over meanwhile);
- ``kill_node``: ``kill -9`` of the primary's keeper and PostgreSQL: the machine is gone
  until it rejoins (after the round);
- ``perform_failover``: ``pg_autoctl perform failover``, a clean switchover;
- ``standby_paused``: the standby stops answering (``SIGSTOP``) for 6 s: commits wait for
  it past the gateways' statement timeout.

Prints one line per round and a markdown table (median and worst over the rounds), and
writes every number to ``--out`` (JSON). Needs root or the ``postgres`` user's rights
(pg_auto_failover runs as ``postgres``) and ``apt-get install postgresql-15-auto-failover``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from app.db import migrate
from app.db.urls import normalize_database_url
from app.testing.upstream import UpstreamServer
from tests.failover_load import MODEL, PER_MTOK, Load, audit, outage, settled
from tests.ha import NOT_INSTALLED, HACluster, available, ha_cluster
from tests.support import GatewayProcess, priced_config, started
from tests.test_failover import _targets

CASES = ("kill_postmaster", "kill_node", "perform_failover", "standby_paused")


def _round(cluster: HACluster, gateways: list[GatewayProcess], case: str, load_s: float) -> dict[str, Any]:
    targets = _targets(gateways[0])
    logs_before = [len(gw.output()) for gw in gateways]
    load = Load([gw.url for gw in gateways], targets, workers=12).start()
    try:
        time.sleep(load_s)
        fault_at = time.monotonic()
        moved = cluster.fault(case)
        deadline = time.monotonic() + 120
        while not all(any(a.status == 200 and a.at > fault_at + 0.5 and a.gateway == g for a in load.answers)
                      for g in range(len(gateways))):
            if time.monotonic() > deadline:
                raise RuntimeError("the gateways did not serve again: " + "\n".join(gw.errors() for gw in gateways))
            time.sleep(0.2)
        time.sleep(load_s)
    finally:
        load.stop()
    ended = time.monotonic()
    settled(cluster.url, [t.task_id for t in targets])
    found = audit(cluster.url, load)
    down = outage(load.answers, fault_at, ended)
    logs = "".join(gw.output()[start:] for gw, start in zip(gateways, logs_before))
    return {
        "case": case, "failed_over": moved, "statuses": dict(Counter(a.status for a in load.answers)),
        "first_503_to_first_200_s": round(down.worst_s, 2), "no_200_s": round(down.stalled_s, 2),
        "refused": down.refused, "served": found.served, "lost": found.lost, "counted_twice": found.counted_twice,
        "counted_unserved": found.counted_unserved, "problems": found.problems,
        "reconciled_landed": logs.count("it had landed, serving it"),
        "reconciled_void": logs.count("it had not landed"),
        "settlements_not_repeated": logs.count("not written again"),
        "client_errors": len(load.errors), "restarted": [gw.proc is None or gw.proc.poll() is not None
                                                         for gw in gateways],
    }


def _table(rounds: list[dict[str, Any]]) -> str:
    lines = ["| case | rounds | first 503 → first 200 (s), median / worst | no 200 at all (s), median / worst "
             "| refused meanwhile (503), median | served | reconciled: landed / void | lost | counted twice |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in CASES:
        mine = [r for r in rounds if r["case"] == case]
        if not mine:
            continue
        first = [r["first_503_to_first_200_s"] for r in mine]
        stall = [r["no_200_s"] for r in mine]
        lines.append(
            f"| {case} | {len(mine)} | {statistics.median(first):.1f} / {max(first):.1f} "
            f"| {statistics.median(stall):.1f} / {max(stall):.1f} "
            f"| {statistics.median(r['refused'] for r in mine):.0f} | {sum(r['served'] for r in mine)} "
            f"| {sum(r['reconciled_landed'] for r in mine)} / {sum(r['reconciled_void'] for r in mine)} "
            f"| {sum(r['lost'] for r in mine)} | {sum(r['counted_twice'] for r in mine)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (default 3)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated: {','.join(CASES)}")
    parser.add_argument("--load-s", type=float, default=5.0, help="seconds of load before and after each fault")
    parser.add_argument("--fast-monitor", action="store_true",
                        help="the tests' monitor timing (~3 s to call a node unhealthy) instead of the default")
    parser.add_argument("--out", type=Path, default=Path("bench/results/failover.json"))
    args = parser.parse_args(argv)
    if not available():
        print(NOT_INSTALLED, file=sys.stderr)
        return 2
    cases = [c for c in args.cases.split(",") if c]
    rounds: list[dict[str, Any]] = []
    with ha_cluster(fast_monitor=args.fast_monitor) as cluster, UpstreamServer() as upstream, \
            tempfile.TemporaryDirectory(prefix="taskgate-failover-bench-") as tmp:
        migrate.upgrade(normalize_database_url(cluster.url))
        config = priced_config(Path(tmp), upstream.base_url, MODEL, PER_MTOK)
        with started([GatewayProcess(cluster.url, upstream.base_url, TASKGATE_CONFIG=str(config),
                                     TASKGATE_DATABASE_TIMEOUT_S="2", TASKGATE_DATABASE_RECONCILE_S="90",
                                     TASKGATE_ACCOUNTING_RETRY_S="180", TASKGATE_RESERVATION_SWEEP_S="2")
                      for _ in range(3)]) as gateways:
            for case in cases:
                for n in range(args.rounds):
                    result = _round(cluster, gateways, case, args.load_s)
                    rounds.append(result)
                    print(json.dumps(result), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M:%S"), "fast_monitor": args.fast_monitor,
                                    "rounds": rounds}, indent=1))
    print(_table(rounds))
    return 1 if any(r["problems"] for r in rounds) else 0


if __name__ == "__main__":
    raise SystemExit(main())
