"""One log line per failure kind, rate limited, with a count.

During an outage every request fails the same way; logging each one (let alone its
traceback) buries the log (37 MB for 15,600 refusals in 50 s, issue 8). A
:class:`FaultLog` logs the first failure of a kind at once, then at most one line per
``interval_s`` for that kind, saying how many happened since the last line and the
latest error (its type and message, never a traceback)::

    database unreachable: refusing requests (fail closed): ConnectionRefusedError(...)
    database unreachable: 1523 more in the last 10.0 s (4711 in all), latest: ...

The kind is the caller's (e.g. ``"admission"``) plus the exception's type name.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(slots=True)
class _Kind:
    last_logged: float
    since_logged: int = 0
    total: int = 1


class FaultLog:
    """Rate-limited failure logging for one logger. Not thread-safe (one event loop)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._kinds: dict[str, _Kind] = {}

    def report(self, kind: str, message: str, exc: BaseException | None = None,
               level: int = logging.ERROR) -> None:
        """Count one failure of ``kind``; log it if it is the first of its kind or the
        last line for the kind is ``interval_s`` old."""
        key = f"{kind}:{type(exc).__name__}" if exc is not None else kind
        now = self.clock()
        latest = f"{type(exc).__name__}: {exc}" if exc is not None else ""
        state = self._kinds.get(key)
        if state is None:
            self._kinds[key] = _Kind(last_logged=now)
            self.logger.log(level, "%s: %s%s", kind, message, f" ({latest})" if latest else "")
            return
        state.total += 1
        state.since_logged += 1
        if now - state.last_logged < self.interval_s:
            return
        self.logger.log(level, "%s: %s; %d more in the last %.1f s (%d in all)%s", kind, message,
                        state.since_logged, now - state.last_logged, state.total,
                        f", latest: {latest}" if latest else "")
        state.last_logged, state.since_logged = now, 0

    def count(self, kind: str) -> int:
        """How many failures of ``kind`` (any exception type) were reported."""
        return sum(s.total for k, s in self._kinds.items() if k == kind or k.startswith(kind + ":"))


#: The process's fault log (``app.faults``); ``create_app`` sets its interval.
faults = FaultLog(logging.getLogger("app.faults"))
