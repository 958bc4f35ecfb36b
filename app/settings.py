"""Every knob of taskgate in one place.

Read from the environment (prefix ``TASKGATE_``) and from a ``.env`` file in the
working directory. Units are in the field names (``_s`` seconds, ``_bytes`` bytes).
The application reads :func:`get_settings`, never ``os.environ``.
"""

from __future__ import annotations

import json
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.db.urls import normalize_database_url
from app.guard.normalize import check_patterns

#: Session headers agents send, in lookup order (lower-case). opencode sends
#: ``x-session-id``; Codex CLI ``session-id`` (older builds ``session_id``);
#: Claude Code ``x-claude-code-session-id``.
DEFAULT_SESSION_HEADERS = (
    "x-session-id",
    "session-id",
    "session_id",
    "x-claude-code-session-id",
)


def env_list(value: str) -> list[str]:
    """A list setting from the environment: a JSON list (``["a", "b"]``) or a comma list
    (``a, b``); blanks dropped. Raises ``ValueError`` for a JSON value that is not a list
    of strings."""
    text = value.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            items = None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise ValueError("expects a JSON list of strings or a comma-separated list")
        return [i.strip() for i in items if i.strip()]
    return [i.strip() for i in text.split(",") if i.strip()]


class Settings(BaseSettings):
    """taskgate settings. Field ``foo_bar`` is set by ``TASKGATE_FOO_BAR``."""

    model_config = SettingsConfigDict(
        env_prefix="TASKGATE_", env_file=".env", extra="ignore"
    )

    # --- database -------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        description="postgresql://, postgres:// or postgresql+asyncpg:// URL. Unset: run an "
        "embedded PostgreSQL under data_dir.",
    )
    data_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("taskgate")),
        description="Where the embedded PostgreSQL keeps its data.",
    )
    migrate_on_start: bool = Field(
        default=True,
        description="Run alembic migrations at start-up (always done for the embedded database).",
    )
    database_pool_size: int = 10
    database_timeout_s: float = Field(default=5.0, description="Connect and statement timeout for admission queries.")
    database_reconcile_s: float = Field(default=30.0, gt=0, description="Seconds a request whose admission's commit "
                                        "lost its answer waits to learn if it landed, then 503 (app/db/commits.py).")
    admission_log_retention_s: float = Field(default=3600.0, gt=0, description="Seconds the admission log (one row "
                                             "per counted request, app/db/commits.py) keeps its rows.")

    # --- database: replicas, PgBouncer, faults (see docs/faults.md) ------------
    migration_database_url: str | None = Field(
        default=None,
        description="postgresql+asyncpg:// URL used by `taskgate migrate` and start-up migrations "
        "(a direct connection when database_url goes through PgBouncer). Unset: database_url.",
    )
    database_statement_cache_size: int | None = Field(
        default=None, ge=0,
        description="Named prepared statements asyncpg keeps per connection (each query is then "
        "parsed once per connection, not on every use). Unset: 100 on the embedded PostgreSQL, 0 on "
        "database_url, which may be PgBouncer in transaction mode (no named statements before "
        "PgBouncer 1.21); set it (e.g. 100) for a direct connection to PostgreSQL.",
    )
    accounting_retry_s: float = Field(
        default=60.0, ge=0,
        description="Seconds post-response accounting (usage, ledger, events) is retried with "
        "backoff while the database is unreachable before the record is dropped and logged.",
    )
    embedded_pgdata: Path | None = Field(
        default=None,
        description="Set by `taskgate serve` for its workers: the embedded PostgreSQL data "
        "directory they supervise (restart on crash). Not an operator setting.",
    )
    fault_log_interval_s: float = Field(
        default=10.0, gt=0,
        description="Repeated failures of one kind (database unreachable, ...) are logged once, "
        "then at most once per this many seconds with a count.",
    )

    # --- listening --------------------------------------------------------------
    log_level: str = Field(default="info", description="Level of taskgate's own log lines.")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535, description="Listen port (1-65535).")
    admin_token: str | None = Field(
        default=None,
        description="Bearer token for /admin. Unset: one is generated at start-up and printed once.",
    )

    # --- upstream providers -----------------------------------------------------
    config: Path | None = Field(
        default=None,
        description="Providers and models file (YAML, see app/config). Unset: one OpenAI provider "
        "(upstream_*) and one Anthropic provider (anthropic_*) take every model.",
    )
    upstream_base_url: str = "https://api.openai.com/v1"
    upstream_api_key: str | None = None
    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_api_key: str | None = None
    upstream_connect_timeout_s: float = 10.0
    upstream_timeout_s: float = Field(
        default=600.0,
        description="Total time a non-streamed upstream response may take before 504.",
    )
    upstream_max_connections: int = Field(
        default=1000, ge=1,
        description="Upstream connections per gateway process; a request that finds none free within "
        "upstream_slot_wait_s is refused 503 upstream_busy, not counted (app/proxy/capacity.py).")
    upstream_slot_wait_s: float = Field(
        default=2.0, ge=0,
        description="Seconds a request waits for a free upstream connection before 503 upstream_busy "
        "(with retry-after; nothing forwarded or counted).")

    # --- dollar ceiling (issue 19) -----------------------------------------------
    stream_usage: bool = Field(
        default=True,
        description="Ask upstream for usage on every streamed chat completion (stream_options.include_usage) "
        "and hide the usage-only chunk from clients that did not ask. false: only for tasks with a token or "
        "dollar limit; other such streams are relayed untouched and their tokens are unknown.",
    )
    retention_days: float | None = Field(
        default=None, gt=0,
        description="Delete tasks stopped or idle (tasks.updated_at) longer than this many days, with "
        "their events, ledger, conversations and request log, hourly in batches (app/retention.py); "
        "unset: never.")
    retention_interval_s: float = Field(default=3600.0, gt=0, description="Seconds between retention runs.")
    ledger_keep_per_conversation: int = Field(default=256, ge=0, description="Ledger rows kept per conversation "
                                              "of an active task (at least the guard's window); 0: no compaction.")
    ledger_compact_after_s: float = Field(default=3600.0, ge=0, description="Older ledger rows go once completed "
                                          "this long ago (app/retention.py).")
    reservation_sweep_s: float = Field(default=30.0, ge=0, description="Seconds between sweeps releasing holds "
                                       "of gone gateways past their deadline (app/admission/reservations.py); 0: off.")
    cost_wait_s: float = Field(
        default=30.0, ge=0, allow_inf_nan=False,
        description="Seconds a request of a task with cost_limit_usd waits when it fits only once the "
        "reservations in flight settle (then 429 cost_reserved, not counted); a task's cost_wait_s wins; "
        "0: refuse at once.",
    )

    # --- fleet budgets: the clock of budget windows, escrow leases ----------------
    clock_offset_s: float = Field(
        default=0.0, allow_inf_nan=False,
        description="Seconds added to the system clock when reading budget windows (day, week, month); "
        "0 in production. Tests and drills move a gateway into the next window with it.",
    )
    budget_lease_s: float = Field(60.0, gt=0, allow_inf_nan=False, description="Seconds an escrow lease lives.")
    budget_lease_requests: int = Field(default=256, ge=1, description="Most requests one escrow lease take grants.")
    # --- requests ---------------------------------------------------------------
    max_body_bytes: int = Field(default=32 * 1024 * 1024, description="Largest request body accepted (413 above).")
    mcp_max_answer_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, description="Largest answer to an MCP "
                                      "tools/call read (judged before release): app/mcp/routes.py.")

    # --- client-facing hardening (app/proxy/endpoints.py, inbound.py, server.py) --
    extra_endpoints: str = Field(
        default="",
        description="More endpoints to forward besides the defaults, each explicitly: a comma list "
        "of 'METHOD /v1/path' with {name} for one path segment, e.g. 'GET /v1/files/{id}, POST "
        "/v1/batches'. Extra POSTs consume one unit of allowance; extra GETs are free.",
    )
    body_timeout_s: float = Field(
        default=120.0,
        description="Deadline for receiving a whole request body, from the first read (408 after "
        "it, connection closed); 0 disables.",
    )
    header_timeout_s: float = Field(
        default=30.0,
        description="Deadline for a request's line and headers, from the connection's opening (or "
        "the request's first byte on a kept-alive connection); the connection is closed after "
        "it. 0 disables.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        description="Largest request target plus headers (431 and close above); 0 disables.",
    )
    max_connections: int = Field(
        default=2048,
        description="Connections and requests served at once per process (uvicorn "
        "limit_concurrency: 503 above); 0 disables. Each relayed request also holds an upstream "
        "connection: raise the open-files limit to more than twice this.",
    )
    max_connections_per_client: int = Field(default=256, ge=0, description="Open connections per client IP and "
                                            "process; more get over_cap_header_timeout_s (app/client_caps.py); 0: off.")
    max_unfinished_per_client: int = Field(default=64, ge=0, description="Connections per client IP and process "
                                           "without their first headers; more get over_cap_header_timeout_s; 0: off.")
    over_cap_header_timeout_s: float = Field(default=1.0, ge=0, description="First-byte and header deadline "
                                             "of a connection past a per-client cap under pressure; 0: none.")
    first_byte_timeout_s: float = Field(default=5.0, ge=0, description="A new connection silent this long is "
                                        "closed; 0 disables.")
    keep_alive_timeout_s: float = Field(default=30.0, description="Idle time after which a kept-alive client "
                                        "connection is closed; above the clients' own (httpx, the SDKs: 5 s).")
    forward_proxy_headers: bool = Field(
        default=False,
        description="Forward the client's Forwarded, X-Forwarded-* and X-Real-IP headers to the "
        "provider (dropped by default).",
    )

    @field_validator("extra_endpoints")
    @classmethod
    def _endpoints(cls, v: str) -> str:
        from app.proxy.endpoints import parse_endpoints

        parse_endpoints(v)  # ValueError names the bad entry
        return v

    # --- task defaults ----------------------------------------------------------
    default_request_limit: int = 1000

    # --- stream watchdog --------------------------------------------------------
    stream_idle_timeout_s: float = Field(
        default=90.0,
        description="Silence allowed after the first content event; 0 disables.",
    )
    stream_first_event_timeout_s: float = Field(
        default=300.0,
        description="Time allowed before the first content event; 0 disables.",
    )
    heartbeats_reset_timers: bool = Field(
        default=False,
        description="Count heartbeat events (Anthropic ping, Responses keepalive) as progress (not "
        "recommended). SSE comment lines are never events and never count.",
    )

    # --- relay fidelity ----------------------------------------------------------
    stream_close_grace_s: float = Field(
        default=1.0, ge=0,
        description="After a stream's terminal event, how long upstream may keep sending (e.g. a "
        "trailing `data: [DONE]`) before taskgate closes the stream itself; 0 closes at once.",
    )

    # --- loop guard -------------------------------------------------------------
    loop_guard_enabled: bool = True
    session_headers: Annotated[tuple[str, ...], NoDecode] = Field(
        default=DEFAULT_SESSION_HEADERS,
        description="Session header names, a comma list (x-foo,x-bar) or a JSON list.")
    identical_streak: int = 5
    cycle_repeats: int = 5
    failure_streak: int = 12
    per_tool_thresholds: dict[str, int] = Field(default_factory=dict)
    tool_call_limit: int | None = None
    loop_warning: bool = False
    loop_warning_after: int = 3
    error_patterns: tuple[str, ...] | None = Field(default=None, description="Regexes (RE2 syntax, linear "
                                                   "time) marking a tool result as failed; unset: the defaults.")

    # --- loop guard: result normalisation, failure and empty-result rules ----------
    result_normalizer_defaults: bool = Field(
        default=True,
        description="Apply the built-in result normalisers (Codex shell envelope, UUIDs, hex ids, "
        "timestamps, elapsed times) before hashing a tool result (app/guard/normalize.py).",
    )
    result_normalizers: tuple[str, ...] = Field(
        default=(),
        description="Extra regexes (JSON list, RE2 syntax: linear time, no lookarounds or "
        "backreferences) masked to <masked> in tool results before hashing.",
    )

    text_actions: bool = Field(
        default=True,
        description="Read tool use written as text (smolagents `Calling tools:`, ReAct `Action:`, "
        "code blocks, repeated turn pairs) from request histories without structured tool results "
        "and judge it like tool calls named `text:<name>` (app/guard/text_actions.py).",
    )
    json_offload_bytes: int = Field(default=1 << 20, ge=0, description="Request bodies this large are parsed "
                                    "in a helper process (app/proxy/json_offload.py); 0: never.")
    guard_result_scan_bytes: int = Field(
        default=64 * 1024, ge=1024,
        description="Bytes of one tool result the loop guard normalises and classifies (UTF-8): "
        "a longer result is hashed whole but only its first and last half of this are "
        "normalised and searched for failure patterns (app/guard/result_prints.py).",
    )
    ledger_raw_result_hash: bool = Field(
        default=False, description="Also keep the SHA-256 of each raw (unnormalised) tool result in the ledger.")
    empty_result_streak: int = Field(
        default=12, ge=1,
        description="repeated_empty_result: empty results of one tool in a row, whatever the arguments.",
    )
    empty_result_patterns: tuple[str, ...] | None = Field(
        default=None,
        description="Regexes (whole result, case-insensitive) marking a no-match message as an empty "
        "result; unset uses the built-in defaults.",
    )
    response_repeats: int = Field(default=5, ge=0, description="repeated_response: identical text answers "
                                  "without tool calls in a row in one conversation (answers); 0 disables.")
    repeated_output: bool = Field(default=True, description="repeated_output: watch an answer for one passage "
                                  "repeating (app/guard/repeated_output.py).")
    rule_actions: dict[Literal["repeated_output", "repeated_response", "no_progress"],
                       Literal["latch", "strike", "warn"]] = Field(
        default_factory=dict, description="What a soft rule does (app/guard/strike_rules.py), JSON object; "
        "defaults repeated_output and repeated_response strike, no_progress warns.")
    strike_window_s: float = Field(default=3600.0, gt=0, description="A second strike in one conversation "
                                   "within this many seconds latches the task.")
    guard_notes: bool = Field(default=True, description="Add the gateway note of a strike or warning to the "
                              "conversation's next forwarded request.")
    no_progress_reruns: int = Field(default=8, ge=0, description="no_progress: identical re-runs of one check "
                                    "after other steps that warn (app/guard/progress.py); 0 disables.")
    conversation_request_limit: int | None = Field(
        default=None, ge=0, description="Admitted requests per conversation (requests); unset: no ceiling.")
    conversation_tool_call_limit: int | None = Field(
        default=None, ge=0, description="Tool calls per conversation (calls); unset: no ceiling.")
    conversation_max_duration_s: float | None = Field(
        default=None, gt=0,
        description="Seconds from a conversation's first counted request; unset: no ceiling.")

    @field_validator("result_normalizers", "empty_result_patterns", "error_patterns")
    @classmethod
    def _valid_patterns(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if v is None else tuple(check_patterns(v))

    # --- stops reaching open requests in every process ---------------------------
    stop_listen: bool = Field(
        default=True,
        description="Hear stops from every gateway process at once through PostgreSQL LISTEN on "
        "one direct connection per process (see app/proxy/stop_watch.py).",
    )
    listen_database_url: str | None = Field(
        default=None,
        description="Direct postgresql+asyncpg:// URL for LISTEN when database_url goes through "
        "PgBouncer (transaction mode cannot LISTEN). Unset: database_url.",
    )
    stop_poll_interval_s: float = Field(
        default=0.5,
        description="While this process has open requests and LISTEN is off or down, read their "
        "tasks' latches this often (one indexed query); 0 disables polling.",
    )

    # --- operator console (metrics, logs, stop webhook) ---------------------------
    metrics_token: str | None = Field(
        default=None, description="Bearer token required by GET /metrics; unset: /metrics is open.")
    log_format: Literal["text", "json"] = Field(
        default="text", description="taskgate's own log lines: text, or one JSON object per line.")
    access_log: bool = Field(default=False, description="One log line per HTTP request (app.access).")
    stop_webhook_url: str | None = Field(
        default=None, description="POST a JSON document (Slack-compatible) here when a task stops.")
    stop_webhook_attempts: int = Field(default=4, ge=1, description="Delivery attempts per stop.")
    stop_webhook_timeout_s: float = Field(default=5.0, gt=0, description="Timeout of one attempt.")
    stop_webhook_backoff_s: float = Field(
        default=1.0, ge=0, description="Pause before the 2nd attempt; doubles for each next one.")
    ledger_argument_preview: int = Field(
        default=0, ge=0, le=4096,
        description="Keep the first N characters of each tool call's canonical arguments in the "
        "ledger, secrets masked (app/guard/preview.py); 0: hashes only.")
    request_log_retention_s: float = Field(
        default=7 * 86400, ge=0, le=10 * 366 * 86400,
        description="Seconds the request log (one row per relayed response: the dashboard's "
        "overview and task timeline, GET /admin/stats) is kept; 0: no request log.")

    # --- start-up validation (app/startup.py prints these errors as one line) -------
    @field_validator("session_headers", mode="before")
    @classmethod
    def _header_list(cls, v: object) -> object:
        return env_list(v) if isinstance(v, str) else v

    @field_validator("session_headers")
    @classmethod
    def _lower(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(h.lower() for h in v)

    @field_validator("database_url", "migration_database_url", "listen_database_url")
    @classmethod
    def _asyncpg_url(cls, v: str | None) -> str | None:
        return None if v is None else normalize_database_url(v)

    def ensure_admin_token(self) -> bool:
        """Generate ``admin_token`` when unset. Returns ``True`` if one was generated."""
        if self.admin_token:
            return False
        self.admin_token = "tgadm-" + secrets.token_urlsafe(24)
        return True


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
