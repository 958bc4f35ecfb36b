"""Strikes before the latch (issue 34 item 2): the soft loop rules (``repeated_output``,
``repeated_response``) cut or refuse one answer and note it to the model in-band; a
second strike in the same conversation within ``TASKGATE_STRIKE_WINDOW_S`` latches.

- ``conversations.strikes``: strikes counted in the current window (0: none);
  ``strike_at``: when the last one was recorded; ``strike_request``: the request id of
  the answer that drew it (one answer draws one strike, whichever rules it trips);
  ``note``: the gateway note the conversation's next admitted request carries (NULL:
  none pending), ``note_reason`` the rule it is about.
- ``tasks.strikes``: strikes the task drew in all (the admin API, the dashboard);
  ``tasks.pending_notes``: conversations of the task holding a note not yet delivered,
  so admission reads the ``conversations`` row only when one may be there (0 on the
  fast path: no statement added).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("strikes", sa.Integer, nullable=False, server_default=sa.text("0")))
    op.add_column("tasks", sa.Column("pending_notes", sa.Integer, nullable=False, server_default=sa.text("0")))
    op.add_column("conversations", sa.Column("strikes", sa.Integer, nullable=False, server_default=sa.text("0")))
    op.add_column("conversations", sa.Column("strike_at", sa.DateTime(timezone=True)))
    op.add_column("conversations", sa.Column("strike_request", sa.Text))
    op.add_column("conversations", sa.Column("note", sa.Text))
    op.add_column("conversations", sa.Column("note_reason", sa.Text))


def downgrade() -> None:
    for column in ("note_reason", "note", "strike_request", "strike_at", "strikes"):
        op.drop_column("conversations", column)
    op.drop_column("tasks", "pending_notes")
    op.drop_column("tasks", "strikes")
