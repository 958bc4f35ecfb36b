"""The typed budget rows (app.budgets.rows) name exactly the columns of their tables
(app.db.schema, which tests/test_db.py keeps the same as the migrated database)."""

from __future__ import annotations

from typing import get_type_hints

from app.budgets.rows import BudgetRow, WindowRow
from app.db import schema


def test_budget_row_has_the_columns_of_budgets() -> None:
    assert set(get_type_hints(BudgetRow)) == {c.name for c in schema.budgets.columns}


def test_window_row_has_the_columns_of_budget_windows() -> None:
    assert set(get_type_hints(WindowRow)) == {c.name for c in schema.budget_windows.columns}


def test_a_nullable_column_may_be_none_in_its_row() -> None:
    for row, table in ((BudgetRow, schema.budgets), (WindowRow, schema.budget_windows)):
        hints = get_type_hints(row)
        nullable = {c.name for c in table.columns if c.nullable and not c.primary_key}
        assert {name for name in nullable if type(None) not in getattr(hints[name], "__args__", ())} == set()
