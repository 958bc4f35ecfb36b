"""The spend record you can export (issue 38 item 5): ``spend_daily``.

One row per task, model and UTC day: the requests settled, their input and output
tokens and their dollars, upserted by the statement that settles a response on its task
(:mod:`app.db.spend`, :mod:`app.guard.ledger`), after the task's row lock, in the same
transaction. ``budget_id`` is the task's (a task's budget never changes) so a deleted
task's spend still counts toward its budget; no foreign keys: the record outlives the
tasks and is never pruned (``request_log`` is, and is written off the request's path).
``model`` is the model the client asked for (``''`` when unknown). ``GET /admin/spend``
reads it (docs/budgets.md, "Spend export").

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spend_daily",
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("task_id", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("budget_id", sa.Text),
        sa.Column("requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("cost_usd", sa.Numeric(20, 10), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_table("spend_daily")
