"""Dollar ceiling, second generation (issue 19).

- ``tasks.cost_wait_s``: seconds a request that would fit once the reservations in flight
  settle waits for them (NULL: ``TASKGATE_COST_WAIT_S``);
- ``tasks.default_max_output_tokens``: the output maximum taskgate adds to a request of the
  task that sets none (NULL: the model's ``default_max_output_tokens``, else none);
- ``tasks.unmetered_responses``: answers upstream reported no usage for (their tokens are
  unknown, not 0);
- ``conversations.anchor_*``: the last request of the conversation whose input tokens
  upstream reported: its token count, how many history items it had, the hash of those
  items (and of everything else that is tokenised) and its model. The next request whose
  history extends it is bounded by those tokens plus the bytes it added.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TASK_COLUMNS = (
    ("cost_wait_s", sa.Float),
    ("default_max_output_tokens", sa.BigInteger),
)
_ANCHOR_COLUMNS = (
    ("anchor_input_tokens", sa.BigInteger),
    ("anchor_items", sa.Integer),
    ("anchor_hash", sa.Text),
    ("anchor_model", sa.Text),
)


def upgrade() -> None:
    for name, type_ in _TASK_COLUMNS:
        op.add_column("tasks", sa.Column(name, type_))
    op.add_column("tasks", sa.Column("unmetered_responses", sa.BigInteger, nullable=False,
                                     server_default=sa.text("0")))
    for name, type_ in _ANCHOR_COLUMNS:
        op.add_column("conversations", sa.Column(name, type_))


def downgrade() -> None:
    for name, _ in reversed(_ANCHOR_COLUMNS):
        op.drop_column("conversations", name)
    op.drop_column("tasks", "unmetered_responses")
    for name, _ in reversed(_TASK_COLUMNS):
        op.drop_column("tasks", name)
