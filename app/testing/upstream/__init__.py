"""A scripted fake model provider ("upstream") for tests, the demo and benchmarks.

It speaks the wire formats taskgate proxies -- OpenAI chat completions, legacy
completions, embeddings, the Responses API and Anthropic Messages -- and answers
with whatever the current *script* says: plain text, endless tool calls, errors,
or a stream pathology for the stream-silence watchdog. Bodies parse with the
official ``openai`` and ``anthropic`` Python SDKs.

Three ways to use it:

- In tests, :class:`UpstreamServer` runs uvicorn in a background thread with its own
  event loop::

      with UpstreamServer() as upstream:           # port 0: a free port
          upstream.script("tool_call", parallel=2)
          client = openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="x")
          ...
          upstream.wait_for(lambda: upstream.open_streams == 0, timeout=1.0)
          upstream.requests[-1].disconnected

- As a command, for demos, benchmarks and real agent CLIs::

      python -m app.testing.upstream --host 127.0.0.1 --port 9000 --scenario loop \\
          --param chunk_delay_s=0.05

- From another process, through the control API (not under ``/v1``):
  ``GET /_upstream/requests`` (recorded requests, open stream counters, the script),
  ``GET|POST /_upstream/script`` (``{"scenario": NAME, "params": {...}}``) and
  ``POST /_upstream/reset`` (forget requests, back to the default ``text`` script).

Endpoints: ``POST /v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/responses``, ``/v1/responses/input_tokens``, ``/v1/messages``,
``/v1/messages/count_tokens``, ``GET /v1/models`` (and ``/v1/models/{id}``). The
``/v1`` prefix is optional. The script applies to the four generation endpoints
(chat, completions, responses, messages); the others always answer normally. Every
response carries ``x-request-id`` and ``x-ratelimit-*`` headers (Anthropic also
``request-id``). Streams are chosen by ``"stream": true``; chat and completions honour
``stream_options.include_usage`` (a final chunk with ``choices: []`` and ``usage``).
Legacy completions have no tools: they answer ``text``, or the default text when the
script's ``text`` is empty.

Scenarios
---------
Set the default with :meth:`UpstreamServer.script` / ``POST /_upstream/script``, or per
request with the model name ``"scenario:<name>"`` (e.g. ``"scenario:stall"``; params
then take their defaults). All durations are in seconds.

Every scenario accepts the *reply* params, which decide what the model says:

- ``text`` (str, default ``"Hello from the taskgate mock upstream."``): the answer text,
  ``""`` for none.
- ``chunks`` (int, default 5): how many deltas the text, and each tool call's
  arguments, are split into when streamed.
- ``chunk_delay_s`` (float, default 0): pause between content events ("trickle": slow
  but steady). With 0 a whole stream goes out in one write.
- ``name`` (str or None, default None): when set, the reply also calls this tool.
- ``arguments`` (dict, or JSON text, default ``{}``): that tool call's arguments.
- ``parallel`` (int, default 1): how many identical calls the reply carries.
- ``input_tokens`` / ``output_tokens`` (int or None): reported usage; by default about
  one token per 4 bytes of request body / of output text and arguments.

Tool call ids are fresh for every response (``call_<random>``, Anthropic
``toolu_<random>``). "Content events" below are text deltas and tool-call deltas
(chat tool_call chunks, ``response.function_call_arguments.delta``,
``input_json_delta``), which is what the stream pathologies count.

``text`` (default)
    Answer ``text``.
``tool_call`` (alias ``loop``)
    Always call a tool: ``name`` defaults to ``"read_file"``, ``arguments`` to
    ``{"path": "README.md"}``, ``text`` to ``""``. An agent that runs the tool and
    asks again loops forever. Streams split the arguments across ``chunks`` deltas:
    chat's first tool delta carries ``id`` and ``name``, later ones only argument
    fragments; Anthropic sends ``input_json_delta`` ``partial_json`` fragments.
``tool_cycle``
    Call the tools in ``calls`` (list of ``{"name": ..., "arguments": ...}``, default
    ``read_file`` then ``list_dir``) in turn: the n-th request under this script gets
    ``calls[n % len(calls)]``.
``error``
    Respond with HTTP ``status`` (default 500) and an error body in the endpoint's
    shape (OpenAI ``{"error": {...}}``, Anthropic ``{"type": "error", "error": {...}}``).
    Params: ``message``, ``type`` (default derived from the status), ``code``,
    ``headers`` (dict of extra response headers, e.g. ``{"retry-after": "1"}``).
``delay``
    Wait ``delay_s`` (default 5) before sending anything (headers included), then
    answer normally. For total-timeout tests.
``stall``
    Stream everything up to and including the ``after_events``-th content event
    (default 1; 0 sends only the preamble), then go silent for ``stall_s`` (default
    3600) without closing, then finish normally. Non-streamed: wait ``stall_s``, then
    answer.
``heartbeats``
    Stream up to ``after_events`` (default 1) content events, then only heartbeats
    (SSE comment ``: ping`` for OpenAI formats, ``event: ping`` for Anthropic) every
    ``interval_s`` (default 1) for ``duration_s`` (default 3600), then finish normally.
    Non-streamed: wait ``duration_s``, then answer.
``think``
    Stream the preamble (role chunk / ``response.created`` / ``message_start``), then
    nothing for ``think_s`` (default 5) -- or only heartbeats every
    ``heartbeat_interval_s`` when set -- then stream normally. Non-streamed: wait
    ``think_s``, then answer.
``truncate``
    Stream up to ``after_events`` (default 2) content events, never the terminal event
    (``data: [DONE]`` / ``response.completed`` / ``message_stop``), then end the HTTP
    body cleanly. Non-streamed: half of the JSON body, cleanly ended.
``close_mid_event``
    Stream up to ``after_events`` (default 1) content events, write the first half of
    the next event, then drop the connection (no chunked terminator). Non-streamed:
    half of the JSON body, then drop.
``malformed``
    After ``after_events`` (default 1) content events send one event whose ``data:``
    line is not valid JSON, then continue and end normally. Non-streamed: a 200 whose
    body is not JSON.

``search``
    Call ``name`` (default ``"grep"``) with different arguments each time: the n-th
    request under this script gets ``{"pattern": "<pattern>-<n>"}`` (``pattern``
    default ``"needle"``). For empty-result streaks whatever the arguments.
``text_tool``
    Answer with tool use written as text, no structured tool call: ``convention``
    ``"react"`` (``Thought:`` / ``Action: <name>`` / ``Action Input: <JSON>``, default),
    ``"json"`` (``Action:`` and ``{"name", "arguments"}``, smolagents' text tool calling)
    or ``"code"`` (``Thought:`` and a ``<code>`` block calling ``name(**arguments)``,
    smolagents' ``CodeAgent``). ``name`` / ``arguments`` default to ``read_file`` /
    ``{"path": "README.md"}``; with ``vary`` the n-th request's string arguments end in
    ``-<n>``; from the ``final_after``-th request on (when set) it gives the final answer
    (``Final Answer: done``, a ``final_answer`` call or ``final_answer("done")``).
``chant``
    Answer ``phrase`` repeated ``repeats`` times (default 40) in ``chunks`` deltas
    (default 40): a model repeating itself inside one answer.

Every request is recorded (:class:`RecordedRequest`). A response that pauses (delays,
stalls, heartbeats, trickle) watches for the client going away (ASGI
``http.disconnect``) and records ``disconnected`` / ``disconnected_at``
(``time.monotonic()`` seconds) the moment it happens; ``open_streams`` counts
streamed responses still in flight.
"""

from .app import UpstreamApp
from .exchange import AbortConnection, RecordedRequest
from .scenarios import SCENARIOS, Script, make_script
from .server import UpstreamServer, main

__all__ = [
    "SCENARIOS",
    "AbortConnection",
    "RecordedRequest",
    "Script",
    "UpstreamApp",
    "UpstreamServer",
    "main",
    "make_script",
]
