"""What PostgreSQL cannot hold is refused by the admin schemas (pure) or made safe
before the ledger and the event history store it."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.admin.schemas import LoopGuardOverrides, ResumeRequest, StopRequest, TaskCreate, TaskPatch
from app.db.bounds import (
    HASH_PREFIX,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    MAX_LEDGER_TEXT,
    ledger_text,
    storable_json,
    text_is_safe,
)
from app.guard.detector import Thresholds


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


REFUSED_BODIES = [
    {"request_limit": 2**63}, {"request_limit": 2**53}, {"request_limit": -1},
    {"token_limit": 2**64}, {"tool_call_limit": 2**63}, {"max_stalls": 2**31}, {"max_stalls": 0},
    {"max_duration_s": float("inf")}, {"max_duration_s": float("nan")}, {"max_duration_s": 1e10},
    {"max_duration_s": 0}, {"stream_idle_timeout_s": -1}, {"stream_first_event_timeout_s": 10**400},
    {"request_limit": "10"}, {"request_limit": True}, {"request_limit": 10.5}, {"max_duration_s": "5"},
    {"max_duration_s": True}, {"metadata": {"a": "x\x00y"}}, {"metadata": {"a\x00": 1}},
    {"metadata": {"a": ["\ud800"]}}, {"metadata": {"a": [{"b": float("inf")}]}},
    {"metadata": nested(MAX_JSON_DEPTH + 1)}, {"metadata": {"a": "x" * MAX_JSON_BYTES}},
    {"metadata": [1]}, {"id": "a\x00b"}, {"id": "x" * 200}, {"loop_guard": {"identical_streak": 2**31}},
    {"loop_guard": {"loop_warning": 0}}, {"loop_guard": {"per_tool_thresholds": {"a\x00": 3}}},
    {"loop_guard": {"per_tool_thresholds": {"x" * 257: 3}}},
]


@pytest.mark.parametrize("body", REFUSED_BODIES, ids=lambda b: repr(b)[:50])
def test_create_refuses_what_postgresql_cannot_hold(body: dict) -> None:
    with pytest.raises(ValidationError):
        TaskCreate.model_validate(body)


def test_strict_numbers_still_accept_json_integers_written_as_floats() -> None:
    task = TaskCreate.model_validate({"request_limit": 10.0, "max_duration_s": 5, "max_stalls": 3})
    assert (task.request_limit, task.max_duration_s, task.max_stalls) == (10, 5.0, 3)
    assert type(task.request_limit) is int


def test_metadata_is_kept_as_sent() -> None:
    metadata = {"a": [1, True, 1.5, None, "é🚀"], "b": {"c": 2**70}, "": nested(MAX_JSON_DEPTH - 1)}
    assert TaskCreate.model_validate({"metadata": metadata}).metadata == metadata


@pytest.mark.parametrize("model,body", [
    (StopRequest, {"reason": "a\x00"}), (StopRequest, {"message": "\ud800"}),
    (StopRequest, {"message": "x" * 2001}), (ResumeRequest, {"reason": "x\x00"}),
    (ResumeRequest, {"reason": ""}), (TaskPatch, {"request_limit": None}),
    (TaskPatch, {"metadata": {"a": "\x00"}}),
])
def test_text_fields_refuse_nul_surrogates_and_overlong(model, body: dict) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(body)


def test_patch_null_request_limit_is_not_in_the_schema() -> None:
    prop = TaskPatch.model_json_schema()["properties"]["request_limit"]
    assert prop["type"] == "integer" and "anyOf" not in prop and "default" not in prop


@pytest.mark.parametrize("overrides", [
    {"per_tool_thresholds": {"check_status": 0}}, {"per_tool_thresholds": {"x": -3}},
    {"identical_streak": 1}, {"identical_streak": 0}, {"cycle_repeats": 1}, {"failure_streak": 0},
    {"loop_warning_after": 0},
])
def test_loop_guard_overrides_refuse_what_the_detector_refuses(overrides: dict) -> None:
    with pytest.raises(ValidationError):
        LoopGuardOverrides.model_validate(overrides)


def test_every_accepted_override_builds_detector_thresholds() -> None:
    o = LoopGuardOverrides.model_validate({"identical_streak": 2, "cycle_repeats": 2, "failure_streak": 2,
                                           "per_tool_thresholds": {"poll": 1}, "loop_warning_after": 1})
    Thresholds(identical_streak=o.identical_streak, cycle_repeats=o.cycle_repeats,
               failure_streak=o.failure_streak, per_tool=o.per_tool_thresholds,
               warn_after=o.loop_warning_after)


def test_overrides_are_checked_by_the_detector_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule the detector adds later is enforced at the API without a schema change."""
    original = Thresholds.__post_init__

    def stricter(self: Thresholds) -> None:
        original(self)
        if self.identical_streak > 100:
            raise ValueError("identical_streak must be <= 100")

    monkeypatch.setattr(Thresholds, "__post_init__", stricter)
    with pytest.raises(ValidationError, match="identical_streak must be <= 100"):
        LoopGuardOverrides.model_validate({"identical_streak": 101})


@pytest.mark.parametrize("value", ["call_1", "toolu_01ABC", "x" * MAX_LEDGER_TEXT, "é🚀"])
def test_ledger_text_keeps_short_safe_values(value: str) -> None:
    assert ledger_text(value) == value


@pytest.mark.parametrize("value", ["a\x00b", "a\ud800", "\udfff", "x" * (MAX_LEDGER_TEXT + 1), "y" * 10**6])
def test_ledger_text_hashes_long_or_unsafe_values(value: str) -> None:
    stored = ledger_text(value)
    assert stored.startswith(HASH_PREFIX) and len(stored) == len(HASH_PREFIX) + 64
    assert text_is_safe(stored) and ledger_text(value) == stored  # a result still finds its call
    assert ledger_text(value + "z") != stored


def test_storable_json_makes_event_details_safe() -> None:
    detail = {"model": "m\x00\ud800", "k\x00": [float("inf"), float("nan"), 1.5, 2**70, None, True],
              "deep": nested(MAX_JSON_DEPTH + 5), "obj": object()}
    safe = storable_json(detail)
    text = json.dumps(safe, allow_nan=False)  # raises on a non-finite number
    assert "\\u0000" not in text and "\\ud800" not in text
    assert safe["model"] == "m\ufffd\ufffd" and safe["k\ufffd"][:4] == [None, None, 1.5, 2**70]
    assert storable_json("plain") == "plain" and storable_json(None) is None
