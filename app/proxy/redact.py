"""Provider keys never reach the client.

Providers often echo the credentials they received (``"Incorrect API key provided:
sk-..."``). :class:`Redactor` replaces every configured provider key in relayed
response headers and body bytes with :data:`MASK`, streamed or not.

Streams: the relay only ever sends whole SSE events (it holds back an incomplete
trailing event until its blank line arrives, :mod:`app.proxy.relay`), and a key holds
no CR or LF, so a key split across two upstream chunks is whole in the bytes that
are sent, and one ``in`` test per key per sent chunk finds it. Bytes without a key are
passed through unchanged (the same object): byte-exactness holds. Keys shorter than
:data:`MIN_KEY_BYTES` are not redacted (replacing a short string would corrupt
ordinary text); real provider keys are 40 bytes and more. A key echoed fully
``\\u``-escaped (``"\\u0073\\u006b..."``, which a JSON client decodes to the key) is masked
too (:func:`_spellings`).
"""

from __future__ import annotations

from collections.abc import Iterable

#: What a key is replaced with (valid inside a JSON string and a header value).
MASK = b"[redacted by taskgate]"
MIN_KEY_BYTES = 8


class Redactor:
    """Replace ``keys`` (provider API keys, as text) in bytes and header values."""

    __slots__ = ("keys",)

    def __init__(self, keys: Iterable[str | None]) -> None:
        plain = {k.strip() for k in keys if k and len(k.strip().encode()) >= MIN_KEY_BYTES}
        unique = {variant for key in plain for variant in _spellings(key)}
        self.keys: tuple[bytes, ...] = tuple(sorted(unique, key=len, reverse=True))

    def __call__(self, data: bytes) -> bytes:
        """``data`` with every key masked; ``data`` itself when it holds none."""
        for key in self.keys:
            if key in data:
                data = data.replace(key, MASK)
        return data

    def headers(self, raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """Raw header pairs with every key masked in the values."""
        if not self.keys:
            return raw
        return [(name, self(value)) for name, value in raw]


def _spellings(key: str) -> set[bytes]:
    """The bytes a key may be echoed as: as is, and JSON-escaped character by character
    (``\\u0073\\u006b...``, lower- and upper-case hex), which a JSON parser reads as the key."""
    return {key.encode(), "".join(f"\\u{ord(c):04x}" for c in key).encode(),
            "".join(f"\\u{ord(c):04X}" for c in key).encode()}


#: Provider header names whose values are credentials (e.g. Azure ``api-key``).
_SECRET_HEADER_WORDS = ("key", "token", "auth", "secret")


def provider_keys(settings: object, providers: Iterable[object] = ()) -> list[str]:
    """Every provider credential the gateway holds: ``upstream_api_key``,
    ``anthropic_api_key``, and each configured provider's ``api_key`` and values of its
    extra ``headers`` named like a credential (``*key*``, ``*token*``, ``*auth*``,
    ``*secret*``; a ``Bearer`` prefix dropped)."""
    keys = [getattr(settings, "upstream_api_key", None), getattr(settings, "anthropic_api_key", None)]
    for provider in providers:
        keys.append(getattr(provider, "api_key", None))
        for name, value in (getattr(provider, "headers", None) or {}).items():
            if any(word in name.lower() for word in _SECRET_HEADER_WORDS):
                keys.append(value.removeprefix("Bearer ").removeprefix("bearer "))
    return [k for k in keys if k]
