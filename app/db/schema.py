"""PostgreSQL schema: tasks, their event history, the tool-call ledger, and the fleet
budgets tasks draw from (budgets, their spend per window, budget keys).

SQLAlchemy Core tables (the hot paths issue hand-written SQL against them). The
alembic migrations in ``migrations/versions`` create exactly this schema; a test
compares the two.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    Numeric,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID

metadata = MetaData()

#: One row per task: its token hash, limits, counters and the durable stop latch.
tasks = Table(
    "tasks",
    metadata,
    Column("id", Text, primary_key=True),
    Column("token_hash", Text, nullable=False, unique=True),
    Column("status", Text, nullable=False, server_default=text("'active'")),
    Column("stop_reason", Text),
    Column("stop_detail", JSONB),
    Column("stopped_at", DateTime(timezone=True)),
    # limits (NULL = no limit)
    Column("request_limit", BigInteger, nullable=False),
    Column("max_duration_s", Float),
    Column("token_limit", BigInteger),
    Column("tool_call_limit", BigInteger),
    Column("max_stalls", Integer),
    Column("stream_idle_timeout_s", Float),
    Column("stream_first_event_timeout_s", Float),
    Column("loop_guard", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # loop guard v2 (migration 0002)
    Column("conversation_request_limit", BigInteger),
    Column("conversation_tool_call_limit", BigInteger),
    Column("conversation_max_duration_s", Float),
    Column("upstream_timeout_s", Float),
    # counters
    Column("admitted_requests", BigInteger, nullable=False, server_default=text("0")),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("tool_calls", BigInteger, nullable=False, server_default=text("0")),
    Column("stalls", Integer, nullable=False, server_default=text("0")),
    Column("refused_requests", BigInteger, nullable=False, server_default=text("0")),
    Column("first_admitted_at", DateTime(timezone=True)),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    # dollar ceiling (US dollars; migration 0002) and allowed model globs
    Column("cost_limit_usd", Numeric(20, 10)),
    Column("cost_usd", Numeric(20, 10), nullable=False, server_default=text("0")),
    Column("reserved_usd", Numeric(20, 10), nullable=False, server_default=text("0")),
    Column("allowed_models", JSONB),
    # dollar ceiling v2 (migration 0004)
    Column("cost_wait_s", Float),
    Column("default_max_output_tokens", BigInteger),
    Column("unmetered_responses", BigInteger, nullable=False, server_default=text("0")),
    # fleet budgets (migration 0007): the budget the task draws from
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="RESTRICT"), index=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # strikes before the latch (migration 0014): strikes drawn in all, and conversations
    # holding a gateway note their next request carries
    Column("strikes", Integer, nullable=False, server_default=text("0")),
    Column("pending_notes", Integer, nullable=False, server_default=text("0")),
    # warning thresholds (migration 0021): percents of each limit; NULL: 50, 80, 95
    Column("thresholds", ARRAY(Float)),
)

#: Durable history of a task: created, stopped, resumed, limits_changed,
#: stream_stalled, stream_truncated, upstream_error, loop_warning, cut_open_requests.
task_events = Table(
    "task_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("task_id", Text, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("reason", Text),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_task_events_task_id_id", "task_id", "id"),
)

#: The loop guard's ledger: one row per tool call invocation, keyed by tool call id.
#: Hashes and flags only, never raw arguments or results.
tool_calls = Table(
    "tool_calls",
    metadata,
    Column("task_id", Text, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("call_id", Text, primary_key=True),
    Column("seq", BigInteger, Identity(), nullable=False),
    Column("conversation_key", Text, nullable=False),
    Column("tool_name", Text, nullable=False),
    Column("arguments_hash", Text, nullable=False),
    Column("result_hash", Text),
    Column("is_error", Boolean),
    Column("is_empty", Boolean),
    Column("raw_result_hash", Text),
    Column("arguments_preview", Text),  # TASKGATE_LEDGER_ARGUMENT_PREVIEW (migration 0008)
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("completed_at", DateTime(timezone=True)),
    Index("ix_tool_calls_conversation", "task_id", "conversation_key", "seq"),
)

#: Dollar holds of admitted requests in flight (migration 0005): amount, the request's
#: deadline, the owning process (host, pid, start time as a Unix time). Deleted when the
#: request settles, or by the sweep once past its deadline with its process gone.
reservations = Table(
    "reservations",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("task_id", Text, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("amount_usd", Numeric(20, 10), nullable=False),
    Column("deadline_at", DateTime(timezone=True), nullable=False),
    Column("owner_host", Text, nullable=False),
    Column("owner_pid", Integer, nullable=False),
    Column("owner_started_at", Float, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the budget windows the hold also reserved in (migration 0007); NULL once released
    Column("budget_ids", ARRAY(Text)),
    Column("budget_window_starts", ARRAY(DateTime(timezone=True))),
    # the admission that took the hold (migration 0015), to rebuild a reconciled one
    Column("admission_key", UUID(as_uuid=True)),
    Index("ix_reservations_deadline_at", "deadline_at"),
    Index("ix_reservations_task_id", "task_id"),
)

#: Per-conversation counters of a task (loop guard v2): admitted requests (counted
#: while a conversation request or duration ceiling is in force), tool calls, the
#: first counted request, and the last answer's text hash with its repeat streak.
conversations = Table(
    "conversations",
    metadata,
    Column("task_id", Text, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("conversation_key", Text, primary_key=True),
    Column("requests", BigInteger, nullable=False, server_default=text("0")),
    Column("tool_calls", BigInteger, nullable=False, server_default=text("0")),
    Column("first_request_at", DateTime(timezone=True)),
    Column("response_hash", Text),
    Column("response_streak", Integer, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the input-token anchor of the dollar ceiling (migration 0004)
    Column("anchor_input_tokens", BigInteger),
    Column("anchor_items", Integer),
    Column("anchor_hash", Text),
    Column("anchor_model", Text),
    # strikes before the latch (migration 0014): strikes in the current window, the last
    # one's time and request, and the note the next request carries (NULL: none)
    Column("strikes", Integer, nullable=False, server_default=text("0")),
    Column("strike_at", DateTime(timezone=True)),
    Column("strike_request", Text),
    Column("note", Text),
    Column("note_reason", Text),
)

#: The request log (migration 0006): one row per relayed response, written by the console
#: (:mod:`app.console.request_log`, batched, off the request path) for the dashboard's
#: overview and task timeline and ``GET /admin/stats``; rows older than
#: ``TASKGATE_REQUEST_LOG_RETENTION_S`` are deleted. ``cost_usd`` in US dollars (NULL: not
#: priced), ``duration_ms`` from admission to the client's last byte.
request_log = Table(
    "request_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("task_id", Text, ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("endpoint", Text, nullable=False),
    Column("model", Text),
    Column("provider", Text),
    Column("status", Integer),
    Column("outcome", Text, nullable=False),
    Column("stream", Boolean, nullable=False),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Numeric(20, 10)),
    Column("duration_ms", Float, nullable=False),
    Column("request_id", Text),
    Index("ix_request_log_finished_at", "finished_at"),
    Index("ix_request_log_task_id_id", "task_id", "id"),
)

#: Stops by time for the overview (``GET /admin/stats``).
Index("ix_task_events_stopped_at", task_events.c.created_at, postgresql_where=text("kind = 'stopped'"))
Index("ix_tasks_stopped_at", tasks.c.stopped_at, postgresql_where=text("stopped_at IS NOT NULL"))

#: A fleet budget: a ceiling (any subset of requests, tokens, dollars) its tasks and the
#: tasks of its descendants draw from, per calendar ``window`` in ``timezone`` (NULL:
#: lifetime). ``depth`` is 1 for a root, at most 4.
budgets = Table(
    "budgets",
    metadata,
    Column("id", Text, primary_key=True),
    Column("parent_id", Text, ForeignKey("budgets.id", ondelete="RESTRICT"), index=True),
    Column("depth", Integer, nullable=False, server_default=text("1")),
    Column("request_limit", BigInteger),
    Column("token_limit", BigInteger),
    Column("cost_limit_usd", Numeric(20, 10)),
    Column("window", Text),
    Column("timezone", Text, nullable=False, server_default=text("'UTC'")),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the kill switch (migration 0016): set by POST /admin/budgets/{id}/pause, NULL when not paused
    Column("paused_at", DateTime(timezone=True)),
    Column("paused_by", Text),
    Column("paused_reason", Text),
    # warning thresholds (migration 0017): percents of each limit; NULL: 50, 80, 95
    Column("thresholds", ARRAY(Float)),
    # per-model limits and rates (migration 0019, app.budgets.model_limits, app.budgets.rates)
    Column("model_limits", JSONB),
    Column("requests_per_minute", BigInteger),
    Column("tokens_per_minute", BigInteger),
    CheckConstraint("depth BETWEEN 1 AND 4", name="ck_budgets_depth"),
    CheckConstraint("\"window\" IS NULL OR \"window\" IN ('day', 'week', 'month')", name="ck_budgets_window"),
)

#: The spend of one budget in one window (``window_start``; the lifetime window starts
#: at the epoch and has no end): requests admitted, tokens reported, dollars settled and
#: reserved by requests in flight; ``exhausted_at`` when its stop webhook fired.
budget_windows = Table(
    "budget_windows",
    metadata,
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("window_end", DateTime(timezone=True)),
    Column("admitted_requests", BigInteger, nullable=False, server_default=text("0")),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Numeric(20, 10), nullable=False, server_default=text("0")),
    Column("reserved_usd", Numeric(20, 10), nullable=False, server_default=text("0")),
    Column("exhausted_at", DateTime(timezone=True)),
    # escrow leases (migration 0010): requests granted to the window's open leases
    Column("leased_requests", BigInteger, nullable=False, server_default=text("0")),
)

#: An escrow lease (migration 0010, :mod:`app.budgets.escrow`): a slice of ``granted``
#: requests of one budget window held by one task, ``spent`` of them admitted; spendable
#: while the budget's ``request_limit`` is the one it was granted under and until
#: ``expires_at``, then folded back into the window by the sweep.
budget_leases = Table(
    "budget_leases",
    metadata,
    Column("holder", Text, primary_key=True),
    Column("budget_id", Text, primary_key=True),
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("window_end", DateTime(timezone=True)),
    Column("granted", BigInteger, nullable=False),
    Column("spent", BigInteger, nullable=False, server_default=text("0")),
    Column("request_limit", BigInteger),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
    ForeignKeyConstraint(["budget_id", "window_start"], ["budget_windows.budget_id", "budget_windows.window_start"],
                         ondelete="CASCADE"),
    CheckConstraint("spent >= 0 AND spent <= granted", name="ck_budget_leases_spent"),
)
Index("ix_budget_leases_window", budget_leases.c.budget_id, budget_leases.c.window_start)

#: A budget's durable history (migration 0016): paused, resumed, ... oldest first by id.
budget_events = Table(
    "budget_events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), nullable=False),
    Column("kind", Text, nullable=False),
    Column("reason", Text),
    Column("detail", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_budget_events_budget_id_id", "budget_id", "id"),
)

#: Warning thresholds crossed (migration 0017): one row per budget, window, limit and
#: threshold, inserted ON CONFLICT DO NOTHING by whichever process sees the crossing first.
budget_warnings = Table(
    "budget_warnings",
    metadata,
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("limit_name", Text, primary_key=True),
    Column("threshold", Float, primary_key=True),
    Column("crossed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

#: Warning thresholds a task crossed (migration 0021): one row per task, limit, limit value
#: and threshold (raising a limit re-arms), inserted ON CONFLICT DO NOTHING by whichever
#: process sees the crossing first.
task_warnings = Table(
    "task_warnings",
    metadata,
    Column("task_id", Text, ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
    Column("limit_name", Text, primary_key=True),
    Column("limit_value", Numeric(20, 10), primary_key=True),
    Column("threshold", Float, primary_key=True),
    Column("crossed_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

#: Per-model spend of a budget window (migration 0019): one row per budget, window and
#: model glob of its ``model_limits``; in-flight dollars are ``budget_model_holds`` rows
#: whose ``reservations`` row still exists.
budget_model_windows = Table(
    "budget_model_windows",
    metadata,
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
    Column("window_start", DateTime(timezone=True), primary_key=True),
    Column("model", Text, primary_key=True),
    Column("admitted_requests", BigInteger, nullable=False, server_default=text("0")),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Numeric(20, 10), nullable=False, server_default=text("0")),
)
budget_model_holds = Table(
    "budget_model_holds",
    metadata,
    Column("reservation_id", BigInteger, primary_key=True),
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
    Column("model", Text, primary_key=True),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("usd", Numeric(20, 10), nullable=False),
    Index("ix_budget_model_holds_window", "budget_id", "window_start", "model"),
)
#: A rated budget's minute (migration 0019): requests admitted, tokens reported in it.
budget_rates = Table(
    "budget_rates",
    metadata,
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
    Column("minute_start", DateTime(timezone=True), primary_key=True),
    Column("requests", BigInteger, nullable=False, server_default=text("0")),
    Column("tokens", BigInteger, nullable=False, server_default=text("0")),
)

#: Budget keys: an API key (only its SHA-256 stored) whose every agent run gets its own
#: task, created from ``template`` (the fields ``POST /admin/tasks`` takes).
budget_keys = Table(
    "budget_keys",
    metadata,
    Column("id", Text, primary_key=True),
    Column("budget_id", Text, ForeignKey("budgets.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("key_hash", Text, nullable=False, unique=True),
    Column("template", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("revoked_at", DateTime(timezone=True)),
)

#: The admission log (migration 0015, :mod:`app.db.commits`): one row per counted
#: request under the key the gateway chose before sending it, so a commit whose answer
#: never arrived is reconciled (read back) instead of retried. ``task_id`` NULL: a
#: *void* key, fenced before any admission under it landed. Kept
#: ``TASKGATE_ADMISSION_LOG_RETENTION_S``.
admissions = Table(
    "admissions",
    metadata,
    Column("key", UUID(as_uuid=True), primary_key=True),
    Column("task_id", Text),
    Column("request_id", Text),
    Column("admitted_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("budget_ids", ARRAY(Text)),
    Column("window_starts", ARRAY(DateTime(timezone=True))),
    Column("reconciled_at", DateTime(timezone=True)),
    Column("settled_at", DateTime(timezone=True)),
    Index("ix_admissions_admitted_at", "admitted_at", postgresql_using="brin"),
)

#: What ``GET /admin/spend`` exports (migration 0020, :mod:`app.db.spend`): per task, model
#: (``''`` unknown) and UTC day, the requests settled with their tokens and dollars,
#: upserted in the statement that settles a response on its task. ``budget_id``: the
#: task's. No foreign keys: kept after its task is deleted, never pruned.
spend_daily = Table(
    "spend_daily",
    metadata,
    Column("day", Date, primary_key=True),
    Column("task_id", Text, primary_key=True),
    Column("model", Text, primary_key=True),
    Column("budget_id", Text),
    Column("requests", BigInteger, nullable=False, server_default=text("0")),
    Column("input_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger, nullable=False, server_default=text("0")),
    Column("cost_usd", Numeric(20, 10), nullable=False, server_default=text("0")),
)
