"""Golden sentences: why a task stopped, for every stop reason over the details its rows
hold (missing keys, old shapes, an operator's stop under any code), byte for byte as
``app.admission.limits.explain_stop`` and the chain behind it wrote them before the stop
details were typed (issue 35): the table was rendered once with that code, and
:func:`app.admission.stop_sentences.explain` must say the same. A change here is a change
to what operators read. One change since: an operator's stop under a limit's code reads the
operator's sentence (it read the limit's with ``None`` for each number)."""

from __future__ import annotations

from typing import Any

import pytest

from app.admission.refusals import event_message
from app.admission.stop_sentences import SENTENCES, Sentences, explain
from app.stop_reasons import STOP_REASONS

OP = {"by": "operator", "message": "runaway, see ticket 12"}
CALL = {"tool_name": "grep", "arguments_hash": "a1", "result_hash": "r1"}
OUT = {"passage_words": 12, "passage": "I cannot find the file", "distinct_words": 5, "count": 6,
       "average_gap_words": 14.5, "threshold": 5, "max_average_gap_words": 400, "conversation_key": "h:abc"}

#: (stop_reason, stop_detail, the sentence)
GOLDEN: list[tuple[str | None, dict[str, Any] | None, str | None]] = [
    ("request_limit", {"admitted_requests": 5, "request_limit": 5},
     "it used all 5 requests of its request_limit"),
    ("request_limit", {},
     "it used all None requests of its request_limit"),
    ("request_limit", OP,
     "stopped by an operator: runaway, see ticket 12"),
    ("token_limit", {"total_tokens": 1200, "token_limit": 1000},
     "upstream reported 1200 tokens, at or over its token_limit of 1000"),
    ("token_limit", {},
     "upstream reported None tokens, at or over its token_limit of None"),
    ("max_duration", {"elapsed_s": 3600.25, "max_duration_s": 3600},
     "3600.25 s passed since its first request; max_duration_s is 3600"),
    ("max_duration", {"elapsed_s": 61.0, "max_duration_s": 60.0},
     "61.0 s passed since its first request; max_duration_s is 60.0"),
    ("max_duration", {},
     "None s passed since its first request; max_duration_s is None"),
    ("cost_limit", {"cost_usd": "4.87", "reserved_usd": "0.5", "request_reservation_usd": "0.2", "cost_limit_usd": "5"},
     ("$4.87 settled (and $0.50 held by requests in flight); the next request could cost up to $0.20, which "
      "would pass its cost_limit_usd of $5.00 even once nothing else is in flight")),
    ("cost_limit", {"cost_usd": "0.0012", "reserved_usd": "0", "request_reservation_usd": "0.00034",
     "cost_limit_usd": "0.001"},
     ("$0.0012 settled (and $0.00 held by requests in flight); the next request could cost up to $0.00034, "
      "which would pass its cost_limit_usd of $0.001 even once nothing else is in flight")),
    ("cost_limit", {"cost_usd": 1, "reserved_usd": 0, "request_reservation_usd": "0.10", "cost_limit_usd": 1},
     ("$1.00 settled (and $0.00 held by requests in flight); the next request could cost up to $0.10, which "
      "would pass its cost_limit_usd of $1.00 even once nothing else is in flight")),
    ("cost_limit", {},
     ("$0.00 settled (and $0.00 held by requests in flight); the next request could cost up to $0.00, which "
      "would pass its cost_limit_usd of $0.00 even once nothing else is in flight")),
    ("cost_limit", OP,
     "stopped by an operator: runaway, see ticket 12"),
    ("repeated_stalls", {"stalls": 3, "max_stalls": 3, "last_stall": {"code": "stream_stalled"}},
     "upstream streams stalled 3 times; max_stalls is 3"),
    ("repeated_stalls", {},
     "upstream streams stalled None times; max_stalls is None"),
    ("repeated_stalls", OP,
     "stopped by an operator: runaway, see ticket 12"),
    ("repeated_tool_call", {**CALL, "count": 5, "threshold": 5, "conversation_key": "h:abc",
     "result_normalizers": ["uuid", "iso_time"]},
     ("the agent called grep 5 times in a row with the same arguments and got the same result, compared after "
      "masking volatile parts such as ids and timings (threshold 5)")),
    ("repeated_tool_call", {**CALL, "count": 5, "threshold": 5, "result_normalizers": []},
     "the agent called grep 5 times in a row with the same arguments and got the same result (threshold 5)"),
    ("repeated_tool_call", {**CALL, "count": 7, "threshold": 7},
     "the agent called grep 7 times in a row with the same arguments and got the same result (threshold 7)"),
    ("repeated_tool_call", {},
     "the agent called None None times in a row with the same arguments and got the same result (threshold None)"),
    ("repeated_tool_call", OP,
     "stopped by an operator: runaway, see ticket 12"),
    ("tool_call_cycle", {"cycle": [CALL, {**CALL, "tool_name": "read_file"}], "block_length": 2, "calls": 10,
     "count": 5, "threshold": 5},
     ("the agent repeated the same cycle of tool calls (grep, read_file) 5 times with unchanged arguments and "
      "results (threshold 5)")),
    ("tool_call_cycle", {"cycle": [{"arguments_hash": "a"}, CALL, CALL], "count": 6},
     ("the agent repeated the same cycle of tool calls (None, grep, grep) 6 times with unchanged arguments and "
      "results (threshold None)")),
    ("tool_call_cycle", {},
     ("the agent repeated the same cycle of tool calls () None times with unchanged arguments and results "
      "(threshold None)")),
    ("repeated_tool_failure", {**CALL, "count": 12, "threshold": 12},
     "grep failed 12 times in a row (threshold 12)"),
    ("repeated_tool_failure", {},
     "None failed None times in a row (threshold None)"),
    ("tool_call_limit", {"count": 101, "threshold": 100},
     "the task made 101 tool calls, over its limit of 100"),
    ("tool_call_limit", {},
     "the task made None tool calls, over its limit of None"),
    ("repeated_empty_result", {**CALL, "count": 12, "threshold": 12, "conversation_key": "h:abc"},
     "grep came back empty 12 times in a row, whatever the arguments (threshold 12)"),
    ("repeated_empty_result", {},
     "None came back empty None times in a row, whatever the arguments (threshold None)"),
    ("conversation_tool_call_limit", {"count": 31, "threshold": 30, "conversation_key": "h:abc"},
     "one conversation (conversation h:abc) made 31 tool calls, over its conversation_tool_call_limit of 30"),
    ("conversation_tool_call_limit", {"count": 31, "threshold": 30, "conversation_key": ""},
     "one conversation made 31 tool calls, over its conversation_tool_call_limit of 30"),
    ("conversation_tool_call_limit", {},
     "one conversation made None tool calls, over its conversation_tool_call_limit of None"),
    ("conversation_request_limit", {"requests": 10, "threshold": 10, "conversation_key": "h:abc"},
     "one conversation (conversation h:abc) used all 10 requests of its conversation_request_limit"),
    ("conversation_request_limit", {"requests": 10, "threshold": 10},
     "one conversation used all 10 requests of its conversation_request_limit"),
    ("conversation_request_limit", {},
     "one conversation used all None requests of its conversation_request_limit"),
    ("conversation_max_duration", {"elapsed_s": 600.5, "threshold": 600.0, "conversation_key": "h:abc"},
     "one conversation (conversation h:abc) ran 600.5 s, at or over its conversation_max_duration_s of 600.0"),
    ("conversation_max_duration", {},
     "one conversation ran None s, at or over its conversation_max_duration_s of None"),
    ("repeated_response", {"count": 5, "threshold": 5, "conversation_key": "h:abc", "text_sha256": "ff"},
     "the model gave the same answer without tool calls 5 times in a row (conversation h:abc) (threshold 5)"),
    ("repeated_response", {"count": 5, "threshold": 5},
     "the model gave the same answer without tool calls 5 times in a row (threshold 5)"),
    ("repeated_response", {},
     "the model gave the same answer without tool calls None times in a row (threshold None)"),
    ("repeated_output", {**OUT, "delivered": "cut"},
     ("the model kept repeating itself inside one streamed answer: a 12-word passage (\"I cannot find the "
      "file\") came 6 times, on average every 14.5 words; taskgate cut the stream")),
    ("repeated_output", {**OUT, "delivered": "streamed"},
     ("the model kept repeating itself inside one streamed answer: a 12-word passage (\"I cannot find the "
      "file\") came 6 times, on average every 14.5 words; the stream had ended before taskgate read the "
      "repetition, so the answer reached the client whole and the task was stopped after it")),
    ("repeated_output", {**OUT, "delivered": "whole"},
     ("the model kept repeating itself inside one answer, which was not streamed: a 12-word passage (\"I cannot "
      "find the file\") came 6 times, on average every 14.5 words; the answer was delivered whole and the task "
      "was stopped after it")),
    ("repeated_output", OUT,
     ("the model kept repeating itself inside one answer: a 12-word passage (\"I cannot find the file\") came 6 "
      "times, on average every 14.5 words")),
    ("repeated_output", {**OUT, "delivered": "elsewhere"},
     ("the model kept repeating itself inside one answer: a 12-word passage (\"I cannot find the file\") came 6 "
      "times, on average every 14.5 words")),
    ("repeated_output", {**OUT, "passage": "", "delivered": "cut"},
     ("the model kept repeating itself inside one streamed answer: a 12-word passage came 6 times, on average "
      "every 14.5 words; taskgate cut the stream")),
    ("repeated_output", {"passage_words": 12, "count": 6},
     "the model kept repeating itself inside one answer: a 12-word passage came 6 times, on average every None words"),
    ("repeated_output", {"chunk_chars": 40, "count": 9, "average_gap_chars": 55.5, "threshold": 8},
     ("the model kept repeating itself inside one answer: a 40-character passage came 9 times, on average every "
      "55.5 characters")),
    ("repeated_output", {"chunk_chars": 40, "count": 9, "average_gap_chars": 55.5, "delivered": "cut"},
     ("the model kept repeating itself inside one streamed answer: a 40-character passage came 9 times, on "
      "average every 55.5 characters; taskgate cut the stream")),
    ("repeated_output", {},
     ("the model kept repeating itself inside one answer: a None-character passage came None times, on average "
      "every None characters")),
    ("no_progress", {**CALL, "count": 8, "threshold": 8, "conversation_key": "h:abc"},
     "the agent re-ran grep 8 times after other steps and got byte-identical output each time (threshold 8)"),
    ("no_progress", {},
     "the agent re-ran None None times after other steps and got byte-identical output each time (threshold None)"),
    ("manual", OP,
     "stopped by an operator: runaway, see ticket 12"),
    ("manual", {"by": "operator", "message": None},
     "stopped by an operator"),
    ("manual", {"by": "operator", "message": ""},
     "stopped by an operator"),
    ("manual", {"by": "operator"},
     "stopped by an operator"),
    ("manual", {},
     None),
    ("deploy_freeze", OP,
     "stopped by an operator: runaway, see ticket 12"),
    ("deploy_freeze", {},
     None),
    ("loop_detected", {**CALL, "count": 5},
     None),
    (None, OP,
     "stopped by an operator: runaway, see ticket 12"),
    (None, {},
     None),
    (None, None,
     None),
    ("manual", None,
     None),
    ("request_limit", None,
     "it used all None requests of its request_limit"),
    ("repeated_output", None,
     ("the model kept repeating itself inside one answer: a None-character passage came None times, on average "
      "every None characters")),
    ("tool_call_cycle", None,
     ("the agent repeated the same cycle of tool calls () None times with unchanged arguments and results "
      "(threshold None)")),
]


@pytest.mark.parametrize(("reason", "detail", "sentence"), GOLDEN)
def test_every_stop_reads_as_before(reason: str | None, detail: dict[str, Any] | None,
                                    sentence: str | None) -> None:
    assert explain(reason, detail) == sentence


@pytest.mark.parametrize(("reason", "detail", "sentence"), GOLDEN)
def test_the_stopped_event_carries_the_same_sentence(reason: str | None, detail: dict[str, Any] | None,
                                                     sentence: str | None) -> None:
    assert event_message("stopped", reason, detail) == f"Stopped ({reason})" + (f": {sentence}." if sentence else ".")


def test_every_stop_reason_has_its_sentence() -> None:
    """mypy checks :data:`SENTENCES` against its type, one key a reason; this, that the
    type's keys are :data:`StopReason`'s (a reason added there needs a sentence here)."""
    assert Sentences.__required_keys__ == STOP_REASONS
    assert SENTENCES.keys() == STOP_REASONS


def test_the_golden_table_covers_every_stop_reason() -> None:
    assert STOP_REASONS <= {reason for reason, _, _ in GOLDEN}
