"""Initial schema: tasks, task_events, tool_calls.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("token_hash", sa.Text, nullable=False, unique=True),
        sa.Column("status", sa.Text, nullable=False, server_default=sa.text("'active'")),
        sa.Column("stop_reason", sa.Text),
        sa.Column("stop_detail", JSONB),
        sa.Column("stopped_at", sa.DateTime(timezone=True)),
        sa.Column("request_limit", sa.BigInteger, nullable=False),
        sa.Column("max_duration_s", sa.Float),
        sa.Column("token_limit", sa.BigInteger),
        sa.Column("tool_call_limit", sa.BigInteger),
        sa.Column("max_stalls", sa.Integer),
        sa.Column("stream_idle_timeout_s", sa.Float),
        sa.Column("stream_first_event_timeout_s", sa.Float),
        sa.Column("loop_guard", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("admitted_requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("tool_calls", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("stalls", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("first_admitted_at", sa.DateTime(timezone=True)),
        sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_table(
        "task_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("detail", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_task_events_task_id_id", "task_events", ["task_id", "id"])
    op.create_table(
        "tool_calls",
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("call_id", sa.Text, primary_key=True),
        sa.Column("seq", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("conversation_key", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=False),
        sa.Column("arguments_hash", sa.Text, nullable=False),
        sa.Column("result_hash", sa.Text),
        sa.Column("is_error", sa.Boolean),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("completed_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_tool_calls_conversation", "tool_calls", ["task_id", "conversation_key", "seq"])


def downgrade() -> None:
    op.drop_table("tool_calls")
    op.drop_table("task_events")
    op.drop_table("tasks")
