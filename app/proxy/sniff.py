"""Recognise a stream by its bytes when upstream labels it as something else.

Some OpenAI-compatible servers send an SSE stream as ``text/plain`` or
``application/json``. When the request asked for a stream (``"stream": true``) and the
response is a success, :func:`sniff_stream` reads the response's first line and
decides by :func:`app.wire.sse.looks_like_sse`; the bytes it read are not lost.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from app.proxy.transport import UpstreamResponse
from app.wire.sse import looks_like_sse

#: Bytes read at most before deciding (a first SSE line is shorter).
SNIFF_BYTES = 64


async def sniff_stream(upstream: UpstreamResponse, deadline: float) -> tuple[bool, AsyncIterator[bytes]]:
    """``(is_stream, chunks)``: whether ``upstream``'s body begins an SSE stream, and
    all of its (decoded) body bytes, the sniffed start included. Reading stops at the
    first line end, :data:`SNIFF_BYTES` or the end of the body. Raises :class:`TimeoutError`
    past ``deadline`` (event-loop time) and :class:`httpx.HTTPError`
    (:mod:`app.proxy.transport`) when the body breaks off, before anything was relayed."""
    chunks = upstream.aiter_bytes()
    first = b""
    async with asyncio.timeout_at(deadline):
        async for chunk in chunks:
            first += chunk
            if b"\n" in first or b"\r" in first or len(first) >= SNIFF_BYTES:
                break
    return looks_like_sse(first), _prepend(first, chunks)


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk
