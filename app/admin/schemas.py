"""Request and response bodies of the admin API (JSON shapes in the OpenAPI docs).

Request bodies accept only what PostgreSQL can hold (:mod:`app.db.bounds`): integers
within their column's range, finite seconds, text and JSON without NUL or lone
surrogates, strict JSON types (``"10"`` and ``true`` are not numbers). Loop-guard
overrides are also checked by the detector's own :class:`~app.guard.detector.Thresholds`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from app.db.bounds import (
    INT4_MAX,
    KEYS_AS_PROPERTY_NAMES,
    MAX_SECONDS,
    FiniteSeconds,
    SafeJsonObject,
    SafeText,
    finite_number,
    pg_bigint,
    pg_int,
    seconds,
)
from app.guard.detector import Thresholds
from app.guard.normalize import check_patterns

TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
TaskId = Annotated[str, StringConstraints(pattern=TASK_ID_PATTERN)]

# The bounded field types of the bodies (app.db.bounds builds them as Annotated types with
# pydantic constraints); a type checker sees the Python type each one validates to.
if TYPE_CHECKING:
    GuardCount = int
    Streak = int
    Repeats = int
    Count = int
    PositiveCount = int
    PositiveSeconds = float
    WaitSeconds = float
    Dollars = float
else:
    #: A count of calls in a loop-guard threshold (the detector's window must fit a bigint).
    GuardCount = pg_int(ge=1)
    Streak = pg_int(ge=2)  # a run of calls: two at least
    Repeats = pg_int(ge=0)  # 0 disables
    Count = pg_bigint(ge=0)
    PositiveCount = pg_bigint(ge=1)
    PositiveSeconds = seconds(gt=0)
    WaitSeconds = seconds(le=3600)
    Dollars = finite_number(ge=0, le=1e9)

#: A warning threshold: percent of a limit, above 0 and at most 100.
WarningPercent = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False, strict=True)]


def distinct_percents(values: list[float] | None) -> list[float] | None:
    """Warning thresholds in ascending order, each once (``None`` stays ``None``)."""
    return sorted(set(values)) if values is not None else None

ToolName = Annotated[SafeText, StringConstraints(min_length=1, max_length=256)]
#: A regular expression in Python ``re`` syntax (JSON Schema's ``regex`` format is ECMA-262).
Pattern = Annotated[SafeText, StringConstraints(min_length=1, max_length=1000),
                    Field(json_schema_extra={"format": "python-regex"})]


def _not_null(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class LoopGuardOverrides(BaseModel):
    """Per-task loop-guard thresholds; unset fields use the global settings. Every
    value the detector would refuse is refused here (422)."""

    model_config = ConfigDict(extra="forbid")

    identical_streak: Streak | None = Field(
        None, description="Rule 1: identical calls in a row (calls).")
    cycle_repeats: Streak | None = Field(
        None, description="Rule 2: repeats of a 2- or 3-call cycle.")
    failure_streak: Streak | None = Field(
        None, description="Rule 3: failures of one tool in a row.")
    per_tool_thresholds: Annotated[dict[ToolName, GuardCount], KEYS_AS_PROPERTY_NAMES,
                                   Field(max_length=1000)] | None = Field(
        None, description="Rule 4: identical-streak threshold per tool name (calls, >= 1), "
        "e.g. {\"check_status\": 20}.")
    loop_warning: StrictBool | None = Field(None, description="Rule 6: warn the model before the stop.")
    loop_warning_after: GuardCount | None = Field(
        None, description="Rule 6: warn from this identical repeat on.")
    empty_result_streak: Streak | None = Field(
        None, description="repeated_empty_result: empty results of one tool in a row (calls).")
    response_repeats: Repeats | None = Field(
        None, description="repeated_response: identical text answers in a row (answers); 0 disables.")
    repeated_output: StrictBool | None = Field(
        None, description="repeated_output: cut a streamed answer that keeps repeating one passage.")
    rule_actions: dict[Literal["repeated_output", "repeated_response", "no_progress"],
                       Literal["latch", "strike", "warn"]] | None = Field(
        None, description="What a soft rule does: latch (stop the task), strike (cut or withhold the answer and "
        "note it to the model; a second strike in the conversation within TASKGATE_STRIKE_WINDOW_S latches) or "
        "warn (note only). Default TASKGATE_RULE_ACTIONS, else repeated_output and repeated_response strike, "
        "no_progress warns.")
    no_progress_reruns: Repeats | None = Field(
        None, description="no_progress: identical re-runs of one check after other steps (runs); 0 disables.")
    result_normalizer_defaults: StrictBool | None = Field(
        None, description="Apply the built-in result normalisers (default TASKGATE_RESULT_NORMALIZER_DEFAULTS).")
    result_normalizers: list[Pattern] | None = Field(
        None, max_length=50,
        description="Extra regexes masked in tool results before hashing, after the global ones.")

    @field_validator("result_normalizers")
    @classmethod
    def _valid_normalizers(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else check_patterns(v)

    @model_validator(mode="after")
    def _detector_accepts(self) -> "LoopGuardOverrides":
        """Build the detector's thresholds from these overrides (defaults elsewhere):
        whatever :class:`Thresholds` refuses is refused here."""
        default = Thresholds()
        Thresholds(  # ValueError -> 422
            identical_streak=default.identical_streak if self.identical_streak is None else self.identical_streak,
            cycle_repeats=default.cycle_repeats if self.cycle_repeats is None else self.cycle_repeats,
            failure_streak=default.failure_streak if self.failure_streak is None else self.failure_streak,
            per_tool=self.per_tool_thresholds or {},
            warn_after=self.loop_warning_after,
        )
        return self


class TaskLimits(BaseModel):
    """Limits of a task. ``null`` means no limit (except ``request_limit``)."""

    model_config = ConfigDict(extra="forbid")

    request_limit: Count | None = Field(
        None, description="Admitted POSTs allowed (requests). Default TASKGATE_DEFAULT_REQUEST_LIMIT.")
    max_duration_s: PositiveSeconds | None = Field(
        None, description=f"Wall-clock seconds from the first admitted request (at most {MAX_SECONDS:g}).")
    token_limit: Count | None = Field(
        None, description="Input + output tokens reported by upstream.")
    tool_call_limit: Count | None = Field(
        None, description="Rule 5: total tool calls of the task.")
    max_stalls: GuardCount | None = Field(
        None, description=f"Stream stalls before the task is stopped (repeated_stalls), at most {INT4_MAX}.")
    stream_idle_timeout_s: FiniteSeconds | None = Field(
        None, description="Override of TASKGATE_STREAM_IDLE_TIMEOUT_S; 0 disables.")
    stream_first_event_timeout_s: FiniteSeconds | None = Field(
        None, description="Override of TASKGATE_STREAM_FIRST_EVENT_TIMEOUT_S; 0 disables.")
    conversation_request_limit: PositiveCount | None = Field(
        None, description="Admitted requests per conversation key (requests); stops the task.")
    conversation_tool_call_limit: Count | None = Field(
        None, description="Tool calls per conversation key (calls); stops the task.")
    conversation_max_duration_s: PositiveSeconds | None = Field(
        None, description="Seconds from a conversation's first counted request; stops the task.")
    upstream_timeout_s: PositiveSeconds | None = Field(
        None, description="Total time a non-streamed request may take upstream (seconds; default "
        "TASKGATE_UPSTREAM_TIMEOUT_S); a timeout counts toward max_stalls.")
    loop_guard: LoopGuardOverrides | None = None
    cost_limit_usd: Dollars | None = Field(
        None, description="Hard ceiling in US dollars: a request is admitted only if the task's settled cost, "
        "the worst-case cost of its requests in flight and this request's worst-case cost stay within it.")
    default_max_output_tokens: PositiveCount | None = Field(
        None, description="With cost_limit_usd: the output maximum taskgate adds to a request that sets none "
        "(max_completion_tokens, max_output_tokens, max_tokens), so the provider enforces the bound its "
        "reservation assumes; default the model's default_max_output_tokens (TASKGATE_CONFIG).")
    cost_wait_s: WaitSeconds | None = Field(
        None, description="Seconds a request waits for the task's reservations in flight to settle when it "
        "fits under cost_limit_usd only once they do (then 429 cost_reserved); default TASKGATE_COST_WAIT_S.")
    allowed_models: list[Annotated[SafeText, StringConstraints(min_length=1, max_length=256)]] | None = Field(
        None, max_length=100,
        description="Model globs the task may use (e.g. [\"gpt-4.1*\"]); other models get 403 "
        "model_not_allowed, not counted. null: any model.")
    thresholds: list[WarningPercent] | None = Field(
        None, max_length=10, description="Warning thresholds: percents of request_limit, token_limit and "
        "cost_limit_usd (above 0, at most 100, at most 10; repeated ones count once) whose crossing is announced "
        "once per limit value (webhook task.threshold, a task_warning event; raising a limit re-arms them). "
        "null: the default, 50, 80 and 95; []: none.")

    @field_validator("thresholds")
    @classmethod
    def _distinct_thresholds(cls, v: list[float] | None) -> list[float] | None:
        return distinct_percents(v)


class TaskCreate(TaskLimits):
    """``POST /admin/tasks`` body. Every field is optional."""

    id: TaskId | None = Field(None, description="Your id for the task; generated when absent.")
    budget: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")] | None = Field(
        None, description="The budget the task draws from (every admission also reserves against it and its "
        "ancestors); null: none.")
    metadata: SafeJsonObject = Field(default_factory=dict, description="Free-form JSON object, stored and "
                                     "returned as is (no NUL, at most 64 KiB, 32 levels deep).")


class TaskPatch(TaskLimits):
    """``PATCH /admin/tasks/{id}`` body: only the fields given change; ``null`` removes
    a limit (``request_limit`` cannot be removed). Raising a limit never clears a stop
    latch (use ``/resume``)."""

    request_limit: Count = Field(  # type: ignore[assignment]
        None, description="Admitted POSTs allowed (requests); not nullable.", json_schema_extra=_not_null)
    metadata: SafeJsonObject | None = Field(None, description="Replaces the metadata; null empties it.")


class StopRequest(BaseModel):
    """``POST /admin/tasks/{id}/stop`` body; optional (no body stops with ``manual``)."""

    model_config = ConfigDict(extra="forbid")
    reason: Annotated[SafeText, StringConstraints(min_length=1, max_length=200)] = Field(
        "manual", description="Stop reason code, e.g. 'manual'.")
    message: Annotated[SafeText, StringConstraints(max_length=2000)] | None = Field(
        None, description="Operator's note, kept in stop_detail.")


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Annotated[SafeText, StringConstraints(min_length=1, max_length=2000)] = Field(
        ..., description="Why the latch is cleared (kept in the history).")


class Task(BaseModel):
    """A task as the admin API shows it."""

    id: str
    status: Literal["active", "stopped"]
    stop_reason: str | None
    stop_detail: dict[str, Any] | None
    stop_message: str | None = Field(None, description="While stopped: the message a refused request of "
                                     "this task gets (why it stopped, in words, with its counters).")
    stopped_at: datetime | None
    admitted_requests: int
    request_limit: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    tool_calls: int
    stalls: int
    max_duration_s: float | None
    token_limit: int | None
    tool_call_limit: int | None
    max_stalls: int | None
    stream_idle_timeout_s: float | None
    stream_first_event_timeout_s: float | None
    conversation_request_limit: int | None = None
    conversation_tool_call_limit: int | None = None
    conversation_max_duration_s: float | None = None
    upstream_timeout_s: float | None = None
    refused_requests: int = Field(0, description="Requests refused because the task was stopped.")
    loop_guard: dict[str, Any]
    cost_limit_usd: float | None = Field(None, description="Dollar ceiling (US dollars), null: none.")
    cost_usd: float = Field(0, description="Settled cost of finished requests (US dollars).")
    reserved_usd: float = Field(0, description="Worst-case cost of requests in flight (US dollars).")
    cost_wait_s: float | None = None
    default_max_output_tokens: int | None = None
    unmetered_responses: int = Field(0, description="Answers upstream reported no usage for: their tokens are "
                                     "unknown (not 0) and not in input_tokens/output_tokens.")
    strikes: int = Field(0, description="Strikes the task drew: answers the loop guard cut or withheld without "
                         "stopping the task (repeated_output, repeated_response; events kind loop_strike).")
    pending_notes: int = Field(0, description="Conversations holding a gateway note their next request carries.")
    allowed_models: list[str] | None = None
    budget: str | None = Field(None, description="The budget the task draws from.")
    thresholds: list[float] = Field(default_factory=lambda: [50.0, 80.0, 95.0], description="Warning "
                                    "thresholds in force (percents of each limit).")
    warnings: list[TaskCrossing] = Field(default_factory=list, description="Thresholds crossed at the limits' "
                                         "current values (GET of one task only; empty in lists).")
    metadata: dict[str, Any]
    first_admitted_at: datetime | None
    created_at: datetime
    updated_at: datetime


class TaskCrossing(BaseModel):
    """A warning threshold the task crossed at its limit's current value."""

    limit: str = Field(..., description="request_limit, token_limit or cost_limit_usd.")
    threshold: float = Field(..., description="Percent of the limit.")
    crossed_at: datetime


class TaskCreated(Task):
    token: str = Field(..., description="The task token. Shown only in this response; stored hashed.")


class TaskList(BaseModel):
    data: list[Task]
    has_more: bool
    next_after: str | None = Field(None, description="Pass as ?after= for the next page.")


class TaskEvent(BaseModel):
    id: int
    kind: str
    reason: str | None
    detail: dict[str, Any]
    message: str = Field("", description="What the event records, in words.")
    created_at: datetime


class TaskEventList(BaseModel):
    data: list[TaskEvent]


class ToolCallRow(BaseModel):
    call_id: str
    seq: int
    conversation_key: str
    tool_name: str
    arguments_hash: str
    arguments_preview: str | None = Field(None, description="With TASKGATE_LEDGER_ARGUMENT_PREVIEW=N: the "
                                          "first N characters of the canonical arguments, secrets masked.")
    result_hash: str | None
    is_error: bool | None
    is_empty: bool | None = None
    raw_result_hash: str | None = None
    created_at: datetime
    completed_at: datetime | None


class ConversationState(BaseModel):
    conversation_key: str
    tool_calls: int
    verdict: str
    reason: str | None
    count: int
    detail: dict[str, Any]


class ToolCallList(BaseModel):
    data: list[ToolCallRow]
    conversations: list[ConversationState]
    has_more: bool
