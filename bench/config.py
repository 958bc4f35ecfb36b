"""Run settings of the suite: the full run and the ``--quick`` smoke run.

Durations are seconds of *measured* load per run (after ``warmup_s``); each run is
a separate load process, so a run costs about ``warmup_s + duration_s + 0.4`` s.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Config:
    repeats: int = 3
    warmup_s: float = 0.5
    duration_s: float = 2.5
    """Non-streaming latency / throughput runs."""
    stream_duration_s: float = 1.5
    """Streaming TTFB / total-time runs (c=1)."""
    paced_warmup_s: float = 0.7
    paced_duration_s: float = 2.0
    """Per-chunk CPU runs: chunks arrive one by one, ``paced_delay_ms`` apart."""
    concurrencies: tuple[int, ...] = (1, 16, 64, 128)
    wrk_concurrencies: tuple[int, ...] = (16, 64, 128)
    """The latency runs at these c are repeated with wrk (:mod:`bench.wrk`), right
    after the :mod:`bench.load` run, for the tail figure."""
    use_wrk: bool = True
    tool_turn_concurrencies: tuple[int, ...] = (1, 16)
    tool_turn_conversations: tuple[str, ...] = ("new", "task")
    """Agent turns each a new conversation's first (issue 39's definition of the target),
    and all of a task's turns in one conversation (its window at the guard's cap)."""
    chunk_counts: tuple[int, int] = (50, 500)
    chunk_size: int = 16
    """Characters of content per streamed delta (an SSE event is about 170 bytes)."""
    paced_delay_ms: float = 1.0
    paced_concurrency: int = 16
    spread_tasks: int = 1000
    open_streams: int = 1000
    hold_s: float = 90.0
    """How long the upstream holds each memory-test stream at most (the client
    closes them as soon as memory is read)."""
    open_timeout_s: float = 25.0
    """The opening of all streams may take at most this long; those not open by
    then are reported, and RSS is read with the streams that are."""
    settle_s: float = 1.0
    """Wait after the streams are open before reading RSS."""
    admission_concurrency: int = 16
    admission_duration_s: float = 1.5
    history_sizes: tuple[int, int] = (10, 500)
    history_duration_s: float = 1.5
    parse_budget_s: float = 0.1
    """Seconds per timed parsing operation (9 bodies x 3 operations)."""
    min_samples: int = 20
    """Latency runs stay open past their duration until this many requests were
    timed (a slow path at high concurrency), up to ``max_window_s``."""
    stream_min_samples: int = 8
    """The same for the c=1 streaming runs (a LiteLLM 500-chunk stream takes ~0.7 s)."""
    max_window_s: float = 10.0
    warm_requests: int = 20
    """Untimed requests per path and response shape before the first repeat
    (LiteLLM's first requests import code lazily and take seconds)."""
    time_budget_s: float = 1200.0
    """Hard ceiling: no repeat starts that would end (judged by the last one's
    length) after this many seconds of measurement; keeps a full run under 25
    minutes with set-up (a repeat took ~300 s on a 2-core VM whose calibration was
    1.8 ms, so 900 s stopped the run after 2 of its 3 repeats)."""
    durable_concurrencies: tuple[int, ...] = (1, 16)
    """The durable reservation's cost: non-streaming runs at these c with the
    embedded server's fsync on and off."""
    workers: int = 2
    """Gateway processes of the ``taskgate_workers`` path (1: no such path)."""
    use_server_pg: bool = False
    use_litellm: bool = True
    use_portkey: bool = True
    only: set[str] = field(default_factory=set)
    """Figures to run (empty: all)."""


def full() -> Config:
    return Config()


def quick() -> Config:
    """About three minutes: one repeat, short windows, same figures; 200
    tasks instead of 1,000 for the spread figures (task creation dominates set-up)."""
    return Config(repeats=1, warmup_s=0.25, duration_s=1.0, stream_duration_s=0.8, paced_warmup_s=0.6,
                  paced_duration_s=1.2, admission_duration_s=0.8, history_duration_s=0.8,
                  parse_budget_s=0.03, settle_s=0.5, open_timeout_s=20.0, spread_tasks=200,
                  min_samples=5, stream_min_samples=3, max_window_s=5.0, warm_requests=5,
                  time_budget_s=240.0)


FIGURES = ("latency", "durable", "tool_turn", "stream", "relay_cpu", "admission", "history", "memory", "parsing")
