"""The request log (issue 22): one row per relayed response, for the dashboard's overview
and task timeline and ``GET /admin/stats``; and indexes for stops by time.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_log",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("endpoint", sa.Text, nullable=False),
        sa.Column("model", sa.Text),
        sa.Column("provider", sa.Text),
        sa.Column("status", sa.Integer),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("cost_usd", sa.Numeric(20, 10)),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("request_id", sa.Text),
    )
    op.create_index("ix_request_log_finished_at", "request_log", ["finished_at"])
    op.create_index("ix_request_log_task_id_id", "request_log", ["task_id", "id"])
    op.create_index("ix_task_events_stopped_at", "task_events", ["created_at"],
                    postgresql_where=sa.text("kind = 'stopped'"))
    op.create_index("ix_tasks_stopped_at", "tasks", ["stopped_at"],
                    postgresql_where=sa.text("stopped_at IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_tasks_stopped_at", "tasks")
    op.drop_index("ix_task_events_stopped_at", "task_events")
    op.drop_table("request_log")
