"""The typed task value (:mod:`app.task`): built from a ``tasks`` row, faithful to it."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from decimal import Decimal

import pytest

from app.db.schema import tasks
from app.task import LoopGuard, Task
from tests.task_values import new_row, task_value


def test_task_has_every_column_of_the_tasks_table() -> None:
    assert {f.name for f in fields(Task)} == {c.name for c in tasks.columns}


def test_from_row_types_the_json_columns_and_ignores_extra_keys() -> None:
    row = new_row(loop_guard={"identical_streak": 3, "result_normalizers": ["x"], "future_key": 1},
                  allowed_models=["gpt-*"], cost_limit_usd=Decimal("2.5"))
    task = Task.from_row({**row, "event_reason": "joined"})
    assert task.loop_guard == LoopGuard(identical_streak=3, result_normalizers=("x",))
    assert task.allowed_models == ("gpt-*",)
    assert task.cost_limit_usd == Decimal("2.5")
    assert task.column("loop_guard") == {"identical_streak": 3, "result_normalizers": ["x"]}
    assert task.column("allowed_models") == ["gpt-*"]


def test_a_missing_column_is_an_error() -> None:
    row = new_row()
    del row["request_limit"]
    with pytest.raises(KeyError):
        Task.from_row(row)


def test_task_is_immutable() -> None:
    task = task_value()
    with pytest.raises(FrozenInstanceError):
        task.status = "stopped"  # type: ignore[misc]


def test_counters() -> None:
    task = task_value(input_tokens=7, output_tokens=5, status="stopped")
    assert task.total_tokens == 12 and not task.active
    assert task_value().active
    assert LoopGuard.from_json(None) == LoopGuard.from_json({}) == LoopGuard()


def test_from_row_is_the_value_the_constructor_builds() -> None:
    row = new_row(loop_guard={"cycle_repeats": 4}, allowed_models=["a", "b"], budget_id="team",
                  stop_detail={"x": 1}, cost_usd=Decimal("0.25"))
    built = Task(**{**{f.name: row[f.name] for f in fields(Task)},
                    "loop_guard": LoopGuard(cycle_repeats=4), "allowed_models": ("a", "b")})
    task = Task.from_row(row)
    assert task == built
    assert all(getattr(task, f.name) == getattr(built, f.name) for f in fields(Task))
