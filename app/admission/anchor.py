"""The conversation-anchored input bound of the dollar ceiling. Pure: no I/O.

An agent re-sends its whole history on every turn, so the byte bound
(:func:`app.admission.cost.input_token_bound`: one token per body byte) reserves a
200 KB turn at 200,000 input tokens when upstream reported 50,000 for the turn before.
When upstream has reported the input tokens of an earlier request of the same
conversation whose history this request *extends* (the same items first, compared item
by item, not byte by byte), this request's input is at most

    those tokens + the bytes of the items added since + REQUEST_OVERHEAD_TOKENS
    (+ MEDIA_PART_TOKENS per media part among the added items)

**Why it is sound.** Chat templates render each message (item) on its own, between
special tokens that byte-level BPE never merges across; so the earlier request's items,
system prompt and tools tokenise to the same tokens again, and upstream counted exactly
those (plus what it adds itself). The items added since are bounded as the byte bound
bounds a body: every token covers at least one byte of the item's UTF-8 JSON text, and
the JSON structure of an item is longer than the few role tokens the template adds to
it. The fixed overhead covers the template's edge effects (an assistant prefill that
now ends its turn). The minimum of this bound and the byte bound is reserved.

**When it falls back to the byte bound** (``None`` here): the conversation's first
request; a history that is not a list of items (Responses ``input`` as a string, or a
``previous_response_id``: the history is upstream's); an earlier item edited, removed
or reordered (compaction, a summarised history); anything else that is tokenised
changed (system prompt, tools, instructions: every top-level field except the ones in
:data:`UNTOKENISED`); another model; and requests that let the provider drop or edit
the history itself (Responses ``truncation: "auto"``, Anthropic ``context_management``),
whose earlier count may be of less than the earlier history. ``cache_control`` markers
are ignored (agents move them every turn; they do not change the tokens).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The history field of each request shape: chat completions and Anthropic Messages
#: ``messages``, Responses ``input``.
HISTORY_FIELDS = ("messages", "input")
#: Top-level fields that are not tokenised as input (sampling, output limits, routing,
#: bookkeeping): they may change between turns without breaking the anchor.
UNTOKENISED = frozenset({
    "model", "max_tokens", "max_completion_tokens", "max_output_tokens", "stream", "stream_options",
    "metadata", "temperature", "top_p", "top_k", "n", "user", "store", "service_tier", "seed",
    "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "parallel_tool_calls",
    "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "include", "background",
})
#: Requests that let the provider drop or edit the history: never anchored.
_PROVIDER_EDITS = ("context_management", "previous_response_id", "conversation")
_MEDIA = re.compile(
    rb'"type":"(?:image|image_url|input_image|input_audio|audio|input_file|file|document)"')


@dataclass(frozen=True, slots=True)
class History:
    """A request's history as the anchor compares it: ``prefixes[i]`` is the hash of
    everything tokenised but the history plus its first ``i`` items (``len(items) + 1``
    hashes), ``sizes[i]`` the UTF-8 bytes of item ``i`` as compact JSON, ``media[i]`` its
    media parts."""

    model: str | None
    prefixes: tuple[str, ...]
    sizes: tuple[int, ...]
    media: tuple[int, ...]

    @property
    def items(self) -> int:
        return len(self.sizes)


@dataclass(frozen=True, slots=True)
class Anchor:
    """What upstream reported for an earlier request of the conversation: its
    ``input_tokens``, how many history ``items`` it had, the hash of them
    (``History.prefixes[items]``) and its ``model``."""

    input_tokens: int
    items: int
    hash: str
    model: str | None


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _canonical(value: Any) -> bytes:
    return json.dumps(_without_cache_control(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8", "surrogatepass")


def history_of(payload: Mapping[str, Any]) -> History | None:
    """The history of a request body, or ``None`` when it cannot be anchored (see the
    module docstring). Costs one JSON encoding and one SHA-256 pass over the body."""
    field = next((f for f in HISTORY_FIELDS if f in payload), None)
    items = payload.get(field) if field is not None else None
    if not isinstance(items, list) or any(payload.get(k) is not None for k in _PROVIDER_EDITS):
        return None
    if payload.get("truncation") not in (None, "disabled"):
        return None
    model = payload.get("model")
    context = {k: v for k, v in payload.items() if k != field and k not in UNTOKENISED}
    try:
        digest = hashlib.sha256(_canonical(context))
        prefixes, sizes, media = [digest.hexdigest()], [], []
        for item in items:
            encoded = _canonical(item)
            sizes.append(len(encoded))
            media.append(len(_MEDIA.findall(encoded)) if b'"type":"' in encoded else 0)
            digest.update(hashlib.sha256(encoded).digest())
            prefixes.append(digest.hexdigest())
    except (RecursionError, ValueError, TypeError):  # nested too deeply to re-encode: the byte bound
        return None
    return History(model if isinstance(model, str) else None, tuple(prefixes), tuple(sizes), tuple(media))


def anchored_tokens(history: History, anchor: Anchor | None, overhead: int, media_part: int) -> int | None:
    """The anchored input bound of a request with ``history`` (``overhead`` and
    ``media_part`` tokens as in :mod:`app.admission.cost`), or ``None`` to fall back to
    the byte bound: no anchor, another model, or a history that does not extend the
    anchor's."""
    if anchor is None or anchor.model != history.model or not 0 < anchor.items <= history.items:
        return None
    if history.prefixes[anchor.items] != anchor.hash:
        return None
    added = history.sizes[anchor.items:]
    return anchor.input_tokens + sum(added) + overhead + media_part * sum(history.media[anchor.items:])


def anchor_after(history: History, input_tokens: int) -> Anchor:
    """The anchor a request with ``history`` leaves once upstream reported its
    ``input_tokens``."""
    return Anchor(input_tokens, history.items, history.prefixes[-1], history.model)
