"""JSON text parsed as :func:`json.loads` parses it, about three times faster.

orjson reads most bodies and stream events (~1 µs for an SSE event rather than ~3);
whatever it refuses goes to the standard library, which accepts a little more
(``NaN``, ``Infinity``, numbers beyond a double, lone surrogates, UTF-16 and BOMs in
bytes), so what :func:`json.loads` accepts is accepted, and errors are its errors.
Text holding a run of 19 or more digits goes to the standard library directly:
orjson reads integers beyond 64 bits as ``float``, the standard library keeps them
exact (the run is found with one ``bytes.translate`` and a substring search: a regular
expression took 28 ns a byte, 3.8 ms for a 168 KB body, four times ``json.loads`` itself).
One difference remains, nesting: orjson reads up to 1,024 levels, the standard library
up to the interpreter's recursion limit (about 1,000, fewer when called deep in a stack).
So :func:`loads` is for what upstream and the database send; a request body, where
hostile nesting arrives, is read by :func:`loads_request`, which keeps orjson's value
only when it nests at most :data:`MAX_DEPTH` levels (below any limit the standard
library could meet) and otherwise parses again with :func:`json.loads`, its value or
its ``RecursionError`` (:func:`app.proxy.inbound.parse_json_object`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

#: Every ASCII digit to ``0``, every other byte to ``.``: a run of 19 digits (JSON numbers
#: are written in ASCII digits only) becomes :data:`_RUN`, found by a substring search.
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x2E for byte in range(256))
_RUN = b"0" * 19
#: Nesting kept from orjson in a request body (orjson's writer's limit); deeper is parsed
#: again by :func:`json.loads`, whose limit is the recursion limit (~1,000, less the frames
#: already on the stack).
MAX_DEPTH = 254


def has_long_digits(data: bytes | bytearray | str) -> bool:
    """Whether ``data`` holds a run of 19 or more ASCII digits (text is read as UTF-8)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _RUN in raw.translate(_DIGITS)


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``: the same value, the same errors (``ValueError``,
    ``RecursionError``, ``TypeError``)."""
    if isinstance(data, (bytes, bytearray, str)) and not has_long_digits(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def loads_for_strings(data: bytes | str) -> Any:
    """JSON text parsed for the strings in it (a stream event's answer text): the
    strings, keys and structure :func:`loads` gives; only an integer of more than 64
    bits may come back as a ``float`` (orjson's reading), which saves the scan for long
    digit runs. The same errors as :func:`loads`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def loads_request(body: bytes) -> Any:
    """``json.loads(body)`` for a request body: the same value and the same errors,
    ``RecursionError`` for nesting the standard library refuses included (module
    docstring). A body shorter than ``2 * MAX_DEPTH`` bytes cannot nest deeper than
    :data:`MAX_DEPTH`; a longer one's value is checked by writing it again with orjson
    (~33 µs for a 168 KB, 500-message agent history, whose ``json.loads`` costs ~500-900
    µs against orjson's ~140), which refuses more than :data:`MAX_DEPTH` levels."""
    if not has_long_digits(body):
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if len(body) < 2 * MAX_DEPTH or nested_at_most_max_depth(value):
                return value
    return json.loads(body)


def nested_at_most_max_depth(value: Any) -> bool:
    """Whether ``value`` (as orjson parses JSON) nests at most :data:`MAX_DEPTH` containers
    deep (a scalar: 0, ``[]``: 1): orjson's writer refuses deeper values
    (``tests/test_json_text.py`` holds it to that)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True
