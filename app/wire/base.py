"""The contract every wire format implements.

taskgate speaks three wire formats: OpenAI chat completions (``/v1/chat/completions``
and the legacy ``/v1/completions``), the OpenAI Responses API (``/v1/responses``) and
Anthropic Messages (``/v1/messages``). Each is one module in :mod:`app.wire` that
implements :class:`WireFormat`; the proxy, the loop guard and the watchdog only ever
talk to this interface, so adding a fourth format touches one new file: what callers
would otherwise branch on (the provider kind a format speaks, the status and error type
of a refusal, the error type of a stream the gateway ends, how streamed usage is asked
for and hidden) is a member of the format.

Everything here is pure: no I/O, no clock, no database.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

#: The provider API a wire format speaks: ``openai`` (chat completions, completions,
#: Responses, embeddings, models) or ``anthropic`` (Messages). It decides which
#: providers may serve a request, how their URL is built and how the key is sent.
ProviderKind = Literal["openai", "anthropic"]

#: How a stream the gateway ended did not finish on its own: ``stalled`` (the
#: watchdog's deadline), ``truncated`` (upstream broke off or sent a too-large event),
#: ``repeated_output`` (the answer kept repeating itself), ``stopped`` (the task was
#: stopped; the refusal's own type is used then, see :meth:`WireFormat.refusal`),
#: ``struck`` (a soft loop rule struck the answer, :mod:`app.guard.strike_rules`; the
#: task goes on).
EndKind = Literal["stalled", "truncated", "repeated_output", "stopped", "struck"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for.

    ``call_id`` is the wire id (chat ``tool_calls[].id``, Responses ``call_id``,
    Anthropic ``tool_use.id``). ``arguments`` is what the model sent: the raw JSON
    text for OpenAI formats (``function.arguments`` / ``arguments`` / custom tool
    ``input``), the ``input`` object for Anthropic (a dict, or the concatenated
    ``partial_json`` text when reconstructed from a stream). Canonicalisation and
    hashing happen in :mod:`app.guard.fingerprint`, so ``'{"a":1,"b":2}'`` and
    ``{"b": 2, "a": 1}`` fingerprint the same.
    """

    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, as the client sent it back in a request.

    ``output`` is the result flattened to text (string content as is; a list of
    content parts joined by ``"\\n"`` from their ``text`` fields; other parts as
    their canonical JSON). ``is_error`` is the wire's own flag (Anthropic
    ``tool_result.is_error``), ``None`` for formats without one: the guard then
    decides by its configured error patterns.
    """

    call_id: str
    output: str
    is_error: bool | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by upstream, in tokens. Missing fields are 0.

    ``input_tokens`` counts every input token the provider processed, cached or not,
    and ``output_tokens`` every output token (reasoning included); these two are what
    ``token_limit`` counts. The cache fields break ``input_tokens`` down (they are
    already part of it, never added again):

    - ``cache_read_input_tokens``: read from the prompt cache (Anthropic
      ``cache_read_input_tokens``; OpenAI ``prompt_tokens_details.cached_tokens`` /
      ``input_tokens_details.cached_tokens``);
    - ``cache_creation_input_tokens``: written to the cache (Anthropic only);
      ``cache_creation_1h_input_tokens`` is the part written with the 1-hour TTL
      (``usage.cache_creation.ephemeral_1h_input_tokens``), the rest has the 5-minute TTL.

    Anthropic reports cached tokens beside ``input_tokens``, OpenAI inside
    ``prompt_tokens`` / ``input_tokens``; each wire format maps its own shape here.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class RequestView:
    """What the gateway needs to know about one request body.

    - ``model``: the ``model`` field, or ``None``.
    - ``stream``: ``True`` when the body asks for SSE (``"stream": true``).
    - ``conversation_seed``: text identifying the conversation when the client sends
      no session header: the first system/developer instructions and the first user
      message, concatenated. Hashed by the caller; empty when the body has none.
    - ``tool_calls``: calls found in the trailing assistant turn of the history (the
      turn whose results this request carries), so a result can be tied to its tool
      name and arguments even when the gateway never saw the response.
    - ``tool_results``: results in the trailing segment of the history (after the
      last assistant turn). Only this segment is read: parsing costs O(new
      messages), not O(history).
    """

    model: str | None = None
    stream: bool = False
    conversation_seed: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    #: The history already has an assistant turn (or a ``previous_response_id``): a
    #: conversation in progress. Only answers to such requests count toward
    #: ``repeated_response`` (the same one-shot prompt sent many times is not a loop).
    continued: bool = False


@dataclass(slots=True)
class ResponseSummary:
    """What a finished response (streamed or not) told the gateway.

    ``tool_calls`` in the order the model emitted them; from a stream, only those
    whose block completed (a call cut off by an upstream error, a stall or a
    truncation is never run by the agent; each observer documents its rule);
    ``usage`` when upstream reported it (``None`` otherwise); ``terminal_seen`` when
    the stream's own terminal event arrived (chat ``data: [DONE]`` or an error chunk,
    Responses ``response.completed`` / ``response.incomplete`` / ``response.failed``
    or ``error``, Anthropic ``message_stop`` or ``error``); always ``True`` for a
    non-streamed body.
    """

    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    terminal_seen: bool = False
    #: SHA-256 hex of the answer's visible text (``None``: no text); set by the relay
    #: for streams (app.guard.repeated_output) and bodies, for ``repeated_response``.
    text_sha256: str | None = None


class EventKind(enum.Enum):
    """How the watchdog treats one SSE event.

    ``CONTENT``: carries model output (text, reasoning, tool-call delta); progress.
    ``DATA``: a real event without content (role header, usage, metadata); progress
    once content has started. ``HEARTBEAT``: keep-alive (Anthropic ``ping``); relayed,
    never progress. ``TERMINAL``: the stream's own end event.
    """

    CONTENT = "content"
    DATA = "data"
    HEARTBEAT = "heartbeat"
    TERMINAL = "terminal"


class StreamObserver(Protocol):
    """Incremental view of one SSE response stream.

    Fed decoded SSE events in order (``event`` is the SSE ``event:`` field or ``""``,
    ``data`` the joined ``data:`` lines). Must cost O(event) per call and keep only
    the partial tool calls and usage, never the whole stream.
    """

    def feed(self, event: str, data: str) -> EventKind:
        """Classify one event and update the partial state. Never raises on bad JSON."""
        ...

    def summary(self) -> ResponseSummary:
        """Tool calls reconstructed so far, usage, and whether the terminal event came."""
        ...


class WireFormat(Protocol):
    """One API wire format. See the module docstring."""

    name: str
    #: The provider kind that serves this format (see :data:`ProviderKind`).
    provider_kind: ProviderKind

    def refusal(self, status: int, type: str) -> tuple[int, str]:
        """The HTTP status and ``error.type`` of a request the gateway refuses itself,
        in this format, from the gateway's own ``status`` and OpenAI ``error.type``
        (e.g. ``(400, "task_stopped")``): the same pair for OpenAI formats; for
        Anthropic a stopped task is 409 and the type is Anthropic's for the status."""
        ...

    def stream_end_type(self, kind: EndKind) -> str:
        """The ``error.type`` of the terminal error event that ends a stream the
        gateway cut for ``kind`` (for ``stopped`` without a refusal at hand; with one,
        the refusal's type from :meth:`refusal` is used)."""
        ...

    def needs_stream_usage(self, path: str, body: Mapping[str, Any]) -> bool:
        """Whether a request to ``path`` with ``body`` (JSON-decoded) gets a stream
        without token usage unless the request asks for it (then
        :meth:`with_stream_usage` asks). ``False`` when the body does not ask for a
        stream, when this format's streams always report usage, or when the client
        asked already."""
        ...

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``body`` asking upstream to report usage on its stream (only
        called when :meth:`needs_stream_usage` said so)."""
        ...

    def is_usage_only(self, event: str, data: str) -> bool:
        """Whether one decoded SSE event is the usage-only event that
        :meth:`with_stream_usage` makes upstream add (the gateway hides it from a
        client that did not ask). Never raises."""
        ...

    def parse_request(self, body: dict[str, Any]) -> RequestView:
        """Read a request body (already JSON-decoded). Never raises on odd shapes."""
        ...

    def parse_response(self, body: dict[str, Any]) -> ResponseSummary:
        """Read a non-streamed response body. Never raises on odd shapes."""
        ...

    def stream_observer(self) -> StreamObserver:
        """A fresh observer for one streamed response."""
        ...

    def error_body(self, message: str, type: str, code: str | None) -> dict[str, Any]:
        """An error body in this format's shape (OpenAI ``{"error": {...}}`` or
        Anthropic ``{"type": "error", "error": {...}}``)."""
        ...

    def stream_error(self, message: str, type: str, code: str, *,
                     observer: StreamObserver | None = None) -> bytes:
        """The terminal SSE bytes that end a stream the gateway had to cut
        (stall, truncation), in this format's own event sequence. ``observer`` is the
        stream's observer, so the event can continue its sequence (Responses: same
        response id and the next ``sequence_number``)."""
        ...

    def text_delta(self, event: str, data: str) -> str:
        """The visible answer text one CONTENT event adds (``""`` for tool-call and
        reasoning deltas). Never raises."""
        ...

    def response_text(self, body: dict[str, Any]) -> str:
        """The visible answer text of a non-streamed response body. Never raises."""
        ...

    def inject_notice(self, body: dict[str, Any], notice: str) -> dict[str, Any]:
        """Return a copy of ``body`` with ``notice`` added as one short instruction at
        the end of the conversation, in a place this format accepts."""
        ...
