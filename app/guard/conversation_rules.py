"""Rules judged per conversation rather than on the tool-call history: the
per-conversation ceilings and the repeated answer. Pure: no I/O, no clock (``now`` is
passed in), no database. The I/O around them is :mod:`app.ledger.conversations`.

A *conversation* is one conversation key within a task (one agent, one sub-agent,
one pass; see :func:`app.guard.fingerprint.conversation_key`). Its counters live in
the ``conversations`` table: admitted ``requests`` (counted while a conversation
request or duration ceiling is in force), ``tool_calls`` (always counted),
``first_request_at``, and the last answer's text hash with its ``response_streak``.

Rules (off unless set, except ``repeated_response``):

- ``conversation_request_limit``: the conversation already had ``requests >=
  conversation_request_limit`` admitted requests; checked at admission.
- ``conversation_max_duration``: ``now >= first_request_at +
  conversation_max_duration_s``; checked at admission.
- ``conversation_tool_call_limit``: checked with the tool-call history by
  :func:`app.guard.detector.detect` (rule 8).
- ``repeated_response`` (5): ``N`` answers in a row in one conversation, each the same
  assistant text without tool calls that the model had just been shown (OpenHands'
  "monologue"); judged when a response ends. An answer counts only when it repeats the
  latest assistant turn of its request's history (:func:`answer_repeats`): the model saw
  its previous answer and gave it again, the conversation grew by it. So the same
  one-shot prompt sent many times, and separate runs behind one canned prefix (Aider's
  fixed example exchange), never count, whatever they answer. An answer that repeats
  nothing it saw ends the row; so does a response with tool calls. Responses without
  text leave the row as it is, and so do answers to requests without an earlier
  assistant turn (:attr:`RequestView.continued`). Limits: a client that changes the
  answer before resending it (strips it, adds ids) is not seen repeating (the text
  action fall-back, :mod:`app.guard.text_actions`, masks ids); a Responses chain on
  ``previous_response_id``, whose history the gateway does not see, counts every
  identical answer, as before.

The latch is still per task: any of these stops the whole task; ``stop_detail``
names the conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from app.stop_reasons import (
    ConversationDurationDetail,
    ConversationRequestsDetail,
    RepeatedResponseDetail,
    StopReason,
)

DEFAULT_RESPONSE_REPEATS = 5

REASON_CONVERSATION_REQUEST_LIMIT: Final[StopReason] = "conversation_request_limit"
REASON_CONVERSATION_MAX_DURATION: Final[StopReason] = "conversation_max_duration"
REASON_REPEATED_RESPONSE: Final[StopReason] = "repeated_response"

#: Where each stop reason is decided, in the order a request meets them.
PRECEDENCE_NOTE = """\
admission, with the task row locked: 1. an already latched task is refused (its first
reason stands); 2. the tool-call history rules on the results this request carries
(app.guard.detector.STOP_PRECEDENCE); 3. conversation_request_limit, then
conversation_max_duration; 4. the task's request_limit, token_limit, max_duration.
While a response streams: repeated_output cuts the stream and latches the task.
When a response ends: the history rules on its new tool calls (ceilings), then
repeated_response. The first reason to latch a task is the one it keeps."""


@dataclass(frozen=True, slots=True)
class ConversationLimits:
    """Per-conversation ceilings; ``None`` is no ceiling. Units: requests, seconds."""

    request_limit: int | None = None
    max_duration_s: float | None = None

    @property
    def active(self) -> bool:
        """Whether admission must count this task's requests per conversation."""
        return self.request_limit is not None or self.max_duration_s is not None


def conversation_breach(
        conversation: Mapping[str, Any] | None, limits: ConversationLimits, now: datetime,
) -> tuple[StopReason, ConversationRequestsDetail | ConversationDurationDetail] | None:
    """Which ceiling admitting one more request of this conversation would break.

    ``conversation``: its ``conversations`` row (``requests``, ``first_request_at``),
    ``None`` before its first counted request. Returns ``(stop_reason, stop_detail)``
    or ``None``; the caller adds the conversation key.
    """
    if conversation is None:
        return None
    requests = conversation["requests"]
    if limits.request_limit is not None and requests >= limits.request_limit:
        return REASON_CONVERSATION_REQUEST_LIMIT, ConversationRequestsDetail(requests=requests,
                                                                             threshold=limits.request_limit)
    first = conversation["first_request_at"]
    if limits.max_duration_s is not None and first is not None:
        if now >= first + timedelta(seconds=limits.max_duration_s):
            return REASON_CONVERSATION_MAX_DURATION, ConversationDurationDetail(
                elapsed_s=round((now - first).total_seconds(), 3), threshold=limits.max_duration_s)
    return None


def answer_repeats(seen_sha256: str | None, answer_sha256: str) -> bool:
    """Whether an answer counts toward ``repeated_response``: it is the text of the latest
    assistant turn the request showed the model (``seen_sha256``, from
    :func:`app.guard.text_turns.latest_answer_sha256`). ``None`` (no earlier answer text in
    the history: a ``previous_response_id`` chain, assistant turns with tool calls only):
    it counts, and the stored previous answer decides."""
    return seen_sha256 is None or seen_sha256 == answer_sha256


def repeated_response(streak: int, repeats: int | None) -> tuple[StopReason, RepeatedResponseDetail] | None:
    """``repeated_response`` when ``streak >= repeats`` (``None`` or 0: rule off)."""
    if not repeats or streak < repeats:
        return None
    return REASON_REPEATED_RESPONSE, RepeatedResponseDetail(count=streak, threshold=repeats)

