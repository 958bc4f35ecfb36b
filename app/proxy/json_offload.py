"""Large request bodies parsed in a helper process, so the event loop never stalls on one.

:func:`json.loads` holds the GIL for the whole parse (~125 ms for a 24 MiB body of log
text), so a worker thread would not help: every other request of the process would wait.
A body of at least ``offload_bytes`` (``TASKGATE_JSON_OFFLOAD_BYTES``, default 1 MiB; 0
turns this off) is parsed by :func:`json.loads` in one helper process per gateway
process (started on first use, ``spawn``), and the value comes back pickled: copying
and unpickling a 24 MiB string costs the loop a few milliseconds. Same parser, same
answers and errors as :func:`app.proxy.inbound.parse_json_object` (it is what runs in
the helper), including the nesting limit.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from app.proxy.inbound import parse_json_object

_pool: ProcessPoolExecutor | None = None


def _executor() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    return _pool


async def parse_json_body(body: bytes, offload_bytes: int) -> dict[str, Any]:
    """:func:`parse_json_object` of ``body``, in the helper process when ``body`` has at
    least ``offload_bytes`` bytes (and ``offload_bytes`` > 0). Raises what it raises (400
    ``invalid_json``). A helper that died is replaced; the body is then parsed here."""
    global _pool
    if offload_bytes <= 0 or len(body) < offload_bytes:
        return parse_json_object(body)
    try:
        return await asyncio.get_running_loop().run_in_executor(_executor(), parse_json_object, body)
    except BrokenProcessPool:
        _pool = None
        return parse_json_object(body)


def shutdown() -> None:
    """Stop the helper process (if one was started)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None
