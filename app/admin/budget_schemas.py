"""Request and response bodies of ``/admin/budgets`` (JSON shapes in the OpenAPI docs).

Same rules as the task bodies (:mod:`app.admin.schemas`): only what PostgreSQL can
hold, strict JSON types, unknown fields refused (422).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from app.admin.schemas import Count, Dollars, PositiveCount, TaskLimits, WarningPercent, distinct_percents
from app.budgets import model_limits
from app.budgets.windows import timezone_names, zone
from app.db.bounds import SafeJsonObject, SafeText

#: A budget id: safe in a URL path and short enough that a run's task id
#: (``<budget>-run-<name>-<16 hex>``, 126 characters at most) is a valid task id.
BUDGET_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
BudgetId = Annotated[str, StringConstraints(pattern=BUDGET_ID_PATTERN)]
#: A budget key's id (``key_`` + 16 hex).
KEY_ID_PATTERN = r"^key_[0-9a-f]{16}$"
#: How deep budgets nest (a root is depth 1: org > team > project > sub-project).
MAX_DEPTH = 4


class ModelLimit(BaseModel):
    """A limit for the models matching one glob, inside the budget's totals, per window."""

    #: the schema says what _limits_something checks: at least one of the two limits, not null
    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in ("cost_limit_usd", "token_limit")]})
    model: str = Field(..., min_length=1, max_length=model_limits.MAX_GLOB, pattern=model_limits.GLOB_PATTERN,
                       description="A model glob (fnmatch: *, ?, [abc]), e.g. \"gpt-4.1*\", matched against "
                       "the model a request names; printable ASCII without spaces.")
    cost_limit_usd: Dollars | None = Field(None, description="US dollars of its requests per window (worst case "
                                           "reserved before dispatch, settled after).")
    token_limit: Count | None = Field(None, description="Input + output tokens upstream reported for its requests "
                                      "per window.")

    @field_validator("model", mode="before")
    @classmethod
    def _glob(cls, v: Any) -> Any:
        problem = model_limits.glob_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _limits_something(self) -> "ModelLimit":
        if self.cost_limit_usd is None and self.token_limit is None:
            raise ValueError(f"the limit for models '{self.model}' sets neither cost_limit_usd nor token_limit")
        return self


def _rate(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        raise ValueError(f"a rate of {value} would admit nothing: give at least 1 per minute, or null for no rate")
    return value


class BudgetLimits(BaseModel):
    """A budget's ceilings; ``null`` means none. Any subset."""

    model_config = ConfigDict(extra="forbid")
    thresholds: list[WarningPercent] | None = Field(
        None, max_length=10, description="Warning thresholds: percents of each limit (above 0, at most 100, at "
        "most 10; repeated ones count once) whose crossing in a window is announced once (webhook "
        "budget.threshold, the "
        "budget's events). null: the default, 50, 80 and 95; []: none.")

    @field_validator("thresholds")
    @classmethod
    def _distinct_thresholds(cls, v: list[float] | None) -> list[float] | None:
        return distinct_percents(v)

    request_limit: Count | None = Field(
        None, description="Admitted requests of all its tasks (and its descendants' tasks) per window.")
    token_limit: Count | None = Field(
        None, description="Input + output tokens upstream reported for them per window.")
    cost_limit_usd: Dollars | None = Field(
        None, description="Dollar ceiling per window (US dollars): worst cases reserved before dispatch, "
        "settled after, as for a task's cost_limit_usd.")
    model_limits: list[ModelLimit] | None = Field(
        None, max_length=model_limits.MAX_ENTRIES, description="Dollars or tokens per model glob per window, inside "
        "the totals; a glob that ran out refuses its models with budget_exhausted, others go on. null or []: none.")
    requests_per_minute: PositiveCount | None = Field(
        None, description="Requests admitted per UTC minute (exact across gateways); over it: 429 rate_limited "
        "with Retry-After. null: no rate.")
    tokens_per_minute: PositiveCount | None = Field(
        None, description="Input + output tokens reported per UTC minute; a request is admitted while its minute "
        "is under it, else 429 rate_limited with Retry-After. null: no rate.")

    @field_validator("requests_per_minute", "tokens_per_minute", mode="before")
    @classmethod
    def _positive_rate(cls, v: Any) -> Any:
        return _rate(v)

    @field_validator("model_limits")
    @classmethod
    def _distinct_globs(cls, v: list[ModelLimit] | None) -> list[ModelLimit] | None:
        globs = [e.model for e in v or []]
        twice = next((g for g in globs if globs.count(g) > 1), None)
        if twice is not None:
            raise ValueError(f"model glob '{twice}' is listed twice; give each glob one entry")
        return v


class BudgetCreate(BudgetLimits):
    """``POST /admin/budgets`` body."""

    id: BudgetId | None = Field(None, description="Your id for the budget; generated when absent.")
    parent: BudgetId | None = Field(None, description=f"The budget this one nests in (depth <= {MAX_DEPTH}).")
    window: Literal["day", "week", "month"] | None = Field(
        None, description="Calendar window the limits apply to; null: the budget's lifetime.")
    timezone: Annotated[SafeText, StringConstraints(min_length=1, max_length=64)] = Field(
        "UTC", description="IANA timezone of the window's calendar, e.g. Europe/Berlin.",
        json_schema_extra={"enum": [*timezone_names()]})
    metadata: SafeJsonObject = Field(default_factory=dict, description="Free-form JSON object.")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        zone(v)  # ValueError -> 422
        return v


class BudgetPatch(BudgetLimits):
    """``PATCH /admin/budgets/{id}`` body: only the fields given change; ``null`` removes
    a ceiling. Takes effect at the next admission (a refused task goes on)."""

    metadata: SafeJsonObject | None = Field(None, description="Replaces the metadata; null empties it.")


class ModelSpend(BaseModel):
    """One model glob's spend in a window."""

    model: str = Field(..., description="The glob of model_limits.")
    admitted_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = Field(0, description="Settled dollars (US dollars).")


class MinuteSpend(BaseModel):
    """A rated budget's current minute."""

    minute_start: datetime
    resets_at: datetime
    requests: int = Field(0, description="Requests admitted in it.")
    tokens: int = Field(0, description="Tokens reported in it.")


class Crossing(BaseModel):
    """A warning threshold a window crossed."""

    limit: Literal["request_limit", "token_limit", "cost_limit_usd"]
    threshold: float = Field(..., description="Percent of the limit.")
    crossed_at: datetime


class WindowSpend(BaseModel):
    """A budget's spend in one window."""

    window_start: datetime
    window_end: datetime | None = Field(None, description="Exclusive end; null for the lifetime window.")
    resets_at: datetime | None = Field(None, description="When the next window opens (window_end).")
    admitted_requests: int = Field(0, description="Requests admitted (also those spent on escrow leases).")
    leased_requests: int = Field(0, description="Requests granted to its tasks' escrow leases and not spent yet: "
                                 "reclaimed when the window runs short, folded back when a lease expires.")
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = Field(0, description="Settled dollars (US dollars).")
    reserved_usd: float = Field(0, description="Worst-case dollars of requests in flight (US dollars).")
    exhausted_at: datetime | None = Field(None, description="When the window first refused a request.")
    warnings: list[Crossing] = Field(default_factory=list, description="Warning thresholds crossed in the "
                                      "window, in the order they were crossed.")
    models: list[ModelSpend] = Field(default_factory=list, description="Spend per glob of model_limits (those "
                                     "with a request in the window).")


class Budget(BaseModel):
    """A budget as the admin API shows it."""

    id: str
    parent: str | None
    depth: int
    request_limit: int | None
    token_limit: int | None
    cost_limit_usd: float | None
    window: Literal["day", "week", "month"] | None
    timezone: str
    thresholds: list[float] = Field(..., description="Warning thresholds in force (percents of each limit).")
    model_limits: list[ModelLimit] = Field(default_factory=list, description="Limits per model glob per window.")
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    minute: MinuteSpend | None = Field(None, description="A rated budget's current minute.")
    metadata: dict[str, Any]
    tasks: int = Field(0, description="Tasks drawing directly from this budget.")
    children: list[str] = Field(default_factory=list, description="Budgets nested directly in this one.")
    current: WindowSpend = Field(..., description="Spend in the current window.")
    windows: list[WindowSpend] = Field(default_factory=list, description="Past windows, newest first "
                                       "(at most 12; only with GET /admin/budgets/{id}).")
    paused_at: datetime | None = Field(None, description="While paused (the kill switch): since when. Every "
                                       "task under it and its nested budgets is refused until it is resumed.")
    paused_by: str | None = Field(None, description="While paused: who paused it.")
    paused_reason: str | None = Field(None, description="While paused: why.")
    created_at: datetime
    updated_at: datetime


class PauseRequest(BaseModel):
    """``POST /admin/budgets/{id}/pause`` body."""

    model_config = ConfigDict(extra="forbid")
    reason: Annotated[SafeText, StringConstraints(min_length=1, max_length=2000)] = Field(
        ..., description="Why (the refusal every task under the budget gets quotes it).")
    by: Annotated[SafeText, StringConstraints(min_length=1, max_length=200)] = Field(
        "operator", description="Who pauses it (kept with the pause and in the budget's history).")


class ResumeBudget(BaseModel):
    """``POST /admin/budgets/{id}/resume`` body."""

    model_config = ConfigDict(extra="forbid")
    reason: Annotated[SafeText, StringConstraints(min_length=1, max_length=2000)] = Field(
        ..., description="Why the pause is lifted (kept in the budget's history).")
    by: Annotated[SafeText, StringConstraints(min_length=1, max_length=200)] = Field(
        "operator", description="Who resumes it.")


class BudgetEvent(BaseModel):
    """One row of a budget's history: ``paused``, ``resumed``."""

    id: int
    kind: str
    reason: str | None
    detail: dict[str, Any]
    created_at: datetime


class BudgetEventList(BaseModel):
    data: list[BudgetEvent]


class BudgetList(BaseModel):
    data: list[Budget]
    has_more: bool
    next_after: str | None = Field(None, description="Pass as ?after= for the next page.")


class KeyCreate(BaseModel):
    """``POST /admin/budgets/{id}/keys`` body: the template of every run's task."""

    model_config = ConfigDict(extra="forbid")
    template: TaskLimits = Field(default_factory=TaskLimits, description="Limits and loop-guard settings "
                                 "each run's task gets (the limit fields POST /admin/tasks takes).")
    metadata: SafeJsonObject = Field(default_factory=dict, description="Free-form JSON object.")


class BudgetKey(BaseModel):
    id: str
    budget: str
    template: dict[str, Any]
    metadata: dict[str, Any]
    created_at: datetime
    revoked_at: datetime | None


class BudgetKeyCreated(BudgetKey):
    key: str = Field(..., description="The budget key (use it as the agent's API key). Shown only in this "
                     "response; stored hashed.")


class BudgetKeyList(BaseModel):
    data: list[BudgetKey]
