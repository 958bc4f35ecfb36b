"""Why a task stopped, in one sentence: one function per stop reason over its typed
``stop_detail`` (:mod:`app.stop_reasons`), all in one table (:data:`SENTENCES`), read
through :func:`explain`. The refusal of a stopped task, its ``stopped`` event, the admin
API's ``stop_message`` and the CLI and dashboard that show it all say this sentence
(:mod:`app.admission.refusals`). Pure.

A stored row is not checked against its type (older versions wrote other shapes): every
sentence reads with ``.get``, and a missing number reads ``None``, as it always has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final, TypedDict

from app.admission.cost import dollars
from app.stop_reasons import (
    CallLimitDetail,
    CallStreakDetail,
    ConversationDurationDetail,
    ConversationRequestsDetail,
    CostLimitDetail,
    CycleDetail,
    MaxDurationDetail,
    NoProgressDetail,
    OperatorStop,
    RepeatedOutputDetail,
    RepeatedResponseDetail,
    RepeatedStallsDetail,
    RequestLimitDetail,
    TokenLimitDetail,
    is_stop_reason,
)


def _request_limit(d: RequestLimitDetail) -> str:
    return f"it used all {d.get('request_limit')} requests of its request_limit"


def _token_limit(d: TokenLimitDetail) -> str:
    return f"upstream reported {d.get('total_tokens')} tokens, at or over its token_limit of {d.get('token_limit')}"


def _max_duration(d: MaxDurationDetail) -> str:
    return f"{d.get('elapsed_s')} s passed since its first request; max_duration_s is {d.get('max_duration_s')}"


def _cost_limit(d: CostLimitDetail) -> str:
    return (f"{dollars(Decimal(d.get('cost_usd', 0)))} settled (and {dollars(Decimal(d.get('reserved_usd', 0)))} "
            f"held by requests in flight); the next request could cost up to "
            f"{dollars(Decimal(d.get('request_reservation_usd', 0)))}, which would pass its cost_limit_usd of "
            f"{dollars(Decimal(d.get('cost_limit_usd', 0)))} even once nothing else is in flight")


def _repeated_stalls(d: RepeatedStallsDetail) -> str:
    return f"upstream streams stalled {d.get('stalls')} times; max_stalls is {d.get('max_stalls')}"


def _repeated_tool_call(d: CallStreakDetail) -> str:
    normalised = ", compared after masking volatile parts such as ids and timings" \
        if d.get("result_normalizers") else ""
    return (f"the agent called {d.get('tool_name')} {d.get('count')} times in a row with the same "
            f"arguments and got the same result{normalised} (threshold {d.get('threshold')})")


def _tool_call_cycle(d: CycleDetail) -> str:
    names = ", ".join(str(c.get("tool_name")) for c in d.get("cycle", []))
    return (f"the agent repeated the same cycle of tool calls ({names}) {d.get('count')} times "
            f"with unchanged arguments and results (threshold {d.get('threshold')})")


def _repeated_tool_failure(d: CallStreakDetail) -> str:
    return f"{d.get('tool_name')} failed {d.get('count')} times in a row (threshold {d.get('threshold')})"


def _repeated_empty_result(d: CallStreakDetail) -> str:
    return (f"{d.get('tool_name')} came back empty {d.get('count')} times in a row, whatever "
            f"the arguments (threshold {d.get('threshold')})")


def _tool_call_limit(d: CallLimitDetail) -> str:
    return f"the task made {d.get('count')} tool calls, over its limit of {d.get('threshold')}"


def _no_progress(d: NoProgressDetail) -> str:
    return (f"the agent re-ran {d.get('tool_name')} {d.get('count')} times after other steps and got "
            f"byte-identical output each time (threshold {d.get('threshold')})")


def _in_conversation(d: Mapping[str, object]) -> str:
    """`` (conversation h:…)`` when the detail names its conversation, else ``""``."""
    key = d.get("conversation_key")
    return f" (conversation {key})" if key else ""


def _conversation_tool_call_limit(d: CallLimitDetail) -> str:
    return (f"one conversation{_in_conversation(d)} made {d.get('count')} tool calls, over its "
            f"conversation_tool_call_limit of {d.get('threshold')}")


def _conversation_request_limit(d: ConversationRequestsDetail) -> str:
    return (f"one conversation{_in_conversation(d)} used all {d.get('threshold')} requests of its "
            f"conversation_request_limit")


def _conversation_max_duration(d: ConversationDurationDetail) -> str:
    return (f"one conversation{_in_conversation(d)} ran {d.get('elapsed_s')} s, at or over its "
            f"conversation_max_duration_s of {d.get('threshold')}")


def _repeated_response(d: RepeatedResponseDetail) -> str:
    return (f"the model gave the same answer without tool calls {d.get('count')} times in a row"
            f"{_in_conversation(d)} (threshold {d.get('threshold')})")


def _repeated_output(d: RepeatedOutputDetail) -> str:
    """What it repeated, and how the answer reached the client (``delivered``): streamed
    and cut, streamed whole before the repetition was read, or not streamed and delivered
    whole (the task stopped after it); an old row (``chunk_chars``) in characters."""
    if d.get("passage_words") is not None:
        quoted = f' ("{d["passage"]}")' if d.get("passage") else ""
        what = (f"a {d['passage_words']}-word passage{quoted} came {d.get('count')} times, on average every "
                f"{d.get('average_gap_words')} words")
    else:
        what = (f"a {d.get('chunk_chars')}-character passage came {d.get('count')} times, on average every "
                f"{d.get('average_gap_chars')} characters")
    delivered = d.get("delivered")
    if delivered == "cut":
        return f"the model kept repeating itself inside one streamed answer: {what}; taskgate cut the stream"
    if delivered == "streamed":
        return (f"the model kept repeating itself inside one streamed answer: {what}; the stream had ended "
                f"before taskgate read the repetition, so the answer reached the client whole and the task "
                f"was stopped after it")
    if delivered == "whole":
        return (f"the model kept repeating itself inside one answer, which was not streamed: {what}; the "
                f"answer was delivered whole and the task was stopped after it")
    return f"the model kept repeating itself inside one answer: {what}"


def _operator(d: Mapping[str, object]) -> str | None:
    """An operator's stop (:class:`OperatorStop`, under any code), with the operator's
    note; ``None`` for a detail that is not one."""
    if d.get("by") != "operator":
        return None
    return "stopped by an operator" + (f": {d['message']}" if d.get("message") else "")


class Sentences(TypedDict):
    """The sentence of every stop reason, each over its reason's detail: mypy checks that
    no reason lacks one and that each reads its own reason's detail;
    ``tests/test_stop_sentences.py`` that these keys are :data:`StopReason`'s."""

    request_limit: Callable[[RequestLimitDetail], str]
    token_limit: Callable[[TokenLimitDetail], str]
    max_duration: Callable[[MaxDurationDetail], str]
    cost_limit: Callable[[CostLimitDetail], str]
    repeated_stalls: Callable[[RepeatedStallsDetail], str]
    repeated_tool_call: Callable[[CallStreakDetail], str]
    tool_call_cycle: Callable[[CycleDetail], str]
    repeated_tool_failure: Callable[[CallStreakDetail], str]
    tool_call_limit: Callable[[CallLimitDetail], str]
    repeated_empty_result: Callable[[CallStreakDetail], str]
    conversation_tool_call_limit: Callable[[CallLimitDetail], str]
    conversation_request_limit: Callable[[ConversationRequestsDetail], str]
    conversation_max_duration: Callable[[ConversationDurationDetail], str]
    repeated_response: Callable[[RepeatedResponseDetail], str]
    repeated_output: Callable[[RepeatedOutputDetail], str]
    no_progress: Callable[[NoProgressDetail], str]
    manual: Callable[[OperatorStop], str | None]


SENTENCES: Final[Sentences] = {
    "request_limit": _request_limit,
    "token_limit": _token_limit,
    "max_duration": _max_duration,
    "cost_limit": _cost_limit,
    "repeated_stalls": _repeated_stalls,
    "repeated_tool_call": _repeated_tool_call,
    "tool_call_cycle": _tool_call_cycle,
    "repeated_tool_failure": _repeated_tool_failure,
    "tool_call_limit": _tool_call_limit,
    "repeated_empty_result": _repeated_empty_result,
    "conversation_tool_call_limit": _conversation_tool_call_limit,
    "conversation_request_limit": _conversation_request_limit,
    "conversation_max_duration": _conversation_max_duration,
    "repeated_response": _repeated_response,
    "repeated_output": _repeated_output,
    "no_progress": _no_progress,
    "manual": _operator,
}

def explain(reason: str | None, detail: Mapping[str, Any] | None) -> str | None:
    """One sentence saying why a task stopped, from its ``stop_reason`` and
    ``stop_detail`` (a row as stored: JSON, any shape); ``None`` when there is nothing to
    add (an operator's code without an operator's detail, no reason)."""
    d = detail or {}
    if is_stop_reason(reason) and d.get("by") != "operator":
        sentence: Callable[[Any], str | None] = SENTENCES[reason]  # the row as its reason's detail
        return sentence(d)
    return _operator(d)  # an operator's stop, under any code (a limit's too: its numbers are not in the detail)
