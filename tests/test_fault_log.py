"""The rate-limited fault log: one line per failure kind per interval, with counts."""

from __future__ import annotations

import logging

from app.fault_log import FaultLog


def test_one_line_per_kind_per_interval_with_a_count(caplog):
    now = [0.0]
    log = FaultLog(logging.getLogger("test.faults"), interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="test.faults"):
        for i in range(1000):
            now[0] = i * 0.01  # 1,000 failures over 10 s
            log.report("admission", "refusing requests", ConnectionRefusedError("refused"))
        log.report("admission", "refusing requests", TimeoutError("slow"))  # another kind
        now[0] = 10.5
        log.report("admission", "refusing requests", ConnectionRefusedError("refused"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0] == "admission: refusing requests (ConnectionRefusedError: refused)"
    assert lines[1].startswith("admission: refusing requests (TimeoutError")
    assert "1000 more in the last 10.5 s (1001 in all)" in lines[2]
    assert log.count("admission") == 1002
    assert not any(r.exc_info for r in caplog.records)
