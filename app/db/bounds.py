"""What PostgreSQL can hold: bounded types for input, and sanitisers for what we store.

PostgreSQL refuses integers outside a column's type, text or JSON holding NUL
(``\\u0000``), and strings holding a lone UTF-16 surrogate (``\\ud800``, which JSON may
carry but UTF-8 cannot encode); an ``interval`` overflows long before ``float8`` does,
and an index row must fit in 8191 bytes. Input from the admin API is *rejected* with
these types (422, naming the field); values the proxy stores on its own behalf (tool
call ids and names, event details) are *made safe* with :func:`ledger_text` and
:func:`storable_json`, so a request never fails after its admission because of them.

Types (use them in pydantic models; narrow a range with the factories
:func:`pg_int`, :func:`pg_bigint`, :func:`seconds`): :data:`PgInt` (``integer``
columns), :data:`PgBigInt` (``bigint``), :data:`FiniteSeconds` (finite, 0 to
:data:`MAX_SECONDS`), :data:`SafeText` (no NUL,
no lone surrogate; add ``max_length``), :data:`SafeJsonObject` (a JSON object of safe
strings and finite numbers, at most :data:`MAX_JSON_DEPTH` deep and
:data:`MAX_JSON_BYTES` encoded). Integers are strict: ``"10"`` and ``true`` are
refused; ``10.0`` is accepted as 10 (JSON Schema counts it as an integer).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias, Union

from pydantic import AfterValidator, BeforeValidator, Field, GetJsonSchemaHandler, StringConstraints, WrapValidator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError
from typing_extensions import TypeAliasType

INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
#: Largest integer the API accepts in JSON: 2^53 - 1, the largest every JSON parser
#: reads exactly (I-JSON, RFC 7493); a ``bigint`` column holds it.
MAX_JSON_INT = 2**53 - 1
#: Longest duration or timeout accepted, in seconds (about 31.7 years).
MAX_SECONDS = 1e9
#: Deepest nesting of a stored JSON value (objects and arrays).
MAX_JSON_DEPTH = 32
#: Largest stored JSON value, in bytes of its UTF-8 encoding.
MAX_JSON_BYTES = 64 * 1024
#: Longest tool call id or tool name stored as is, in characters; longer ones are hashed.
MAX_LEDGER_TEXT = 256
#: Prefix of a hashed tool call id or name.
HASH_PREFIX = "sha256:"

#: JSON Schema pattern for strings without NUL (lone surrogates cannot be written in a
#: regex for every engine; they are refused by :func:`_no_surrogates`).
NO_NUL_PATTERN = r"^[^\x00]*$"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def text_is_safe(text: str) -> bool:
    """``True`` when PostgreSQL can store ``text``: no NUL, no lone surrogate."""
    return _UNSAFE.search(text) is None


def ledger_text(value: str, max_chars: int = MAX_LEDGER_TEXT) -> str:
    """A tool call id or tool name as the ledger stores it.

    ``value`` itself when it is at most ``max_chars`` characters and safe; otherwise
    ``"sha256:" + hex`` of its UTF-8 bytes (lone surrogates encoded as is), so the same
    input always maps to the same key and a result still finds its call. Pure.
    """
    if len(value) <= max_chars and text_is_safe(value):
        return value
    return HASH_PREFIX + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def storable_json(value: Any, _depth: int = 0) -> Any:
    """A copy of a JSON-ready value that JSONB accepts: NUL and lone surrogates in
    strings and keys become U+FFFD, non-finite floats ``None``, anything nested deeper
    than :data:`MAX_JSON_DEPTH` ``None``, non-JSON values their ``repr``. Pure."""
    if isinstance(value, str):
        return _UNSAFE.sub("\ufffd", value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if _depth >= MAX_JSON_DEPTH:
        return None
    if isinstance(value, dict):
        return {_UNSAFE.sub("\ufffd", str(k)): storable_json(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable_json(v, _depth + 1) for v in value]
    return _UNSAFE.sub("\ufffd", repr(value))


# --- pydantic types for input ------------------------------------------------------


def _json_integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("int_type", "Input should be a JSON integer")
    return value  # pydantic then takes 10.0 as 10 and refuses 10.5, inf and nan


def _json_number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("float_type", "Input should be a JSON number")
    if isinstance(value, int) and abs(value) > 2**1023:
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return value


def _no_surrogates(text: str) -> str:
    if _SURROGATE.search(text):
        raise PydanticCustomError("string_surrogate", "String should not hold a lone UTF-16 surrogate")
    return text


# Constraints come before the type check in each Annotated: pydantic then applies them
# to the int/float schema itself and publishes them as JSON Schema minimum/maximum.

def pg_int(ge: int = -INT4_MAX - 1, le: int = INT4_MAX) -> Any:
    """A PostgreSQL ``integer`` (int4) field type: a JSON integer in [ge, le]."""
    return Annotated[int, Field(ge=max(ge, -INT4_MAX - 1), le=min(le, INT4_MAX)),
                     BeforeValidator(_json_integer)]


def pg_bigint(ge: int = -MAX_JSON_INT, le: int = MAX_JSON_INT) -> Any:
    """A PostgreSQL ``bigint`` (int8) field type: a JSON integer in [ge, le], within
    ±:data:`MAX_JSON_INT` (beyond it JSON parsers round, and so would validators)."""
    return Annotated[int, Field(ge=max(ge, -MAX_JSON_INT), le=min(le, MAX_JSON_INT)),
                     BeforeValidator(_json_integer)]


def seconds(gt: float | None = None, le: float = MAX_SECONDS) -> Any:
    """A duration field type in seconds: a finite JSON number, >= 0 (> ``gt`` when
    given) and <= ``le`` (at most :data:`MAX_SECONDS`)."""
    bound = Field(gt=gt, le=min(le, MAX_SECONDS), allow_inf_nan=False) if gt is not None else \
        Field(ge=0, le=min(le, MAX_SECONDS), allow_inf_nan=False)
    return Annotated[float, bound, BeforeValidator(_json_number)]


def finite_number(ge: float, le: float) -> Any:
    """A finite JSON number in [ge, le] (e.g. dollars in a ``numeric`` column)."""
    return Annotated[float, Field(ge=ge, le=le, allow_inf_nan=False), BeforeValidator(_json_number)]


PgInt = pg_int()
"""A PostgreSQL ``integer``: a JSON integer in [-2^31, 2^31 - 1]."""

PgBigInt = pg_bigint()
"""A PostgreSQL ``bigint`` fed from JSON: an integer in [-(2^53 - 1), 2^53 - 1]."""

FiniteSeconds = seconds()
"""Seconds: a finite JSON number in [0, :data:`MAX_SECONDS`] (an ``interval`` holds it)."""

SafeText = Annotated[str, StringConstraints(pattern=NO_NUL_PATTERN), AfterValidator(_no_surrogates)]
"""Text PostgreSQL can store: no NUL, no lone surrogate. Add ``max_length`` at the use site."""


class _KeysAsPropertyNames:
    """JSON Schema tweak: pydantic renders a dict with constrained keys as
    ``patternProperties``, which leaves other keys unconstrained; say ``propertyNames``."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        patterns = schema.pop("patternProperties", None)
        if patterns:
            (pattern, values), = patterns.items()
            schema.setdefault("propertyNames", {})["pattern"] = pattern
            schema["additionalProperties"] = values
        return schema


KEYS_AS_PROPERTY_NAMES = _KeysAsPropertyNames()

_FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
if TYPE_CHECKING:  # the JSON value the validator below lets through, as a type checker reads it
    SafeJsonValue: TypeAlias = "list[SafeJsonValue] | dict[str, SafeJsonValue] | str | bool | int | float | None"
else:
    SafeJsonValue = TypeAliasType(
        "SafeJsonValue",
        Union[list["SafeJsonValue"], Annotated[dict[SafeText, "SafeJsonValue"], KEYS_AS_PROPERTY_NAMES],
              SafeText, bool, int, _FiniteFloat, None],
    )


def _json_problem(value: Any, path: str, depth: int) -> tuple[str, str] | None:
    """The first thing PostgreSQL's JSONB would refuse in ``value``, as (path, why)."""
    if isinstance(value, str):
        return None if text_is_safe(value) else (path, "a string holds NUL or a lone surrogate")
    if isinstance(value, float) and not math.isfinite(value):
        return path, "numbers must be finite"
    if isinstance(value, (dict, list)):
        if depth >= MAX_JSON_DEPTH:
            return path, f"nested deeper than {MAX_JSON_DEPTH} levels"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and not text_is_safe(key):
                return path, "a key holds NUL or a lone surrogate"
            found = _json_problem(item, f"{path}.{key}" if path else str(key), depth + 1)
            if found:
                return found
    return None


def _safe_json(value: Any, handler: Any) -> Any:
    problem = _json_problem(value, "", 0)
    if problem:
        where, why = problem
        raise PydanticCustomError("json_unsafe", "JSON cannot be stored: {why} (at {where})",
                                  {"why": why, "where": where or "top level"})
    result = handler(value)
    size = len(json.dumps(result, ensure_ascii=False).encode())
    if size > MAX_JSON_BYTES:
        raise PydanticCustomError("json_too_large", "JSON is {size} bytes encoded; at most {max} allowed",
                                  {"size": size, "max": MAX_JSON_BYTES})
    return result


SafeJsonObject = Annotated[dict[SafeText, SafeJsonValue], KEYS_AS_PROPERTY_NAMES, WrapValidator(_safe_json)]
"""A JSON object JSONB can store (see the module docstring for the bounds)."""
