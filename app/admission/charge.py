"""What a request may cost, decided before admission, and the checks on it that need the
task row: ``allowed_models`` and the dollar ceiling's pricing rules. Pure: no I/O.

:func:`charge_for` runs in the proxy before admission (from the route and the body);
:func:`charge_refusal` runs inside the admission transaction, on the locked task row.
A refusal here is never counted and never sets the latch: the request was not priced or
not allowed, which is a configuration matter, not the agent running away.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from app.admission.anchor import Anchor, History, anchored_tokens, history_of
from app.admission.cost import (
    MEDIA_PART_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
    input_token_bound,
    one_hour_cache,
    output_token_bound,
    own_output_max,
    reservation_usd,
)
from app.config.routing import Route
from app.errors import GatewayError
from app.task import Task

#: Why a request has no reservation (``Charge.unpriced``).
PRICE_UNKNOWN = "price_unknown"
OUTPUT_UNBOUNDED = "output_unbounded"


#: The field taskgate adds to bound the output of a request that sets none, by path:
#: each API's own name for the output maximum.
OUTPUT_MAX_FIELD = {"/v1/chat/completions": "max_completion_tokens", "/v1/completions": "max_tokens",
                    "/v1/responses": "max_output_tokens", "/v1/messages": "max_tokens"}


@dataclass(slots=True)
class Charge:
    """The pricing side of one request: its ``route`` (``None`` for an operator-added
    endpoint, which cannot be priced), its JSON ``body`` and ``payload``, its ``path``.

    The worst-case reservation (:meth:`reservation_usd`) scans the body, so it is
    computed only for tasks with a ``cost_limit_usd``, inside the admission transaction;
    other tasks pay nothing for it. Its history (:func:`app.admission.anchor.history_of`)
    is computed once, the first time it is needed."""

    route: Route | None
    body: bytes = b""
    payload: Mapping[str, Any] | None = None
    embeddings: bool = False
    what: str = "this request"
    path: str = ""
    _history: History | None | bool = False  # False: not computed yet

    @property
    def model(self) -> str | None:
        return None if self.route is None else self.route.requested_model

    @property
    def history_known(self) -> bool:
        """Whether :attr:`history` was computed already (it costs a pass over the body)."""
        return self._history is not False

    @property
    def history(self) -> History | None:
        """The request's history for the anchored input bound (``None``: not anchorable)."""
        if self._history is False:
            self._history = history_of(self.payload or {}) if self.path in OUTPUT_MAX_FIELD else None
        return self._history  # type: ignore[return-value]

    def unpriced(self, task: Task | None = None, metered: bool | None = None) -> str | None:
        """Why the request cannot be reserved (:data:`PRICE_UNKNOWN`,
        :data:`OUTPUT_UNBOUNDED`), or ``None`` when it can (``metered``: as for
        :meth:`added_output_max`)."""
        if self.route is None or self.route.price is None:
            return PRICE_UNKNOWN
        if self._output_bound(task, metered) is None:
            return OUTPUT_UNBOUNDED
        return None

    def added_output_max(self, task: Task | None, metered: bool | None = None) -> tuple[str, int] | None:
        """The output maximum taskgate adds to the forwarded request of a task under a
        dollar ceiling (``metered``: its own or a budget's; default: the task has a
        ``cost_limit_usd``), as ``(field, tokens)``: only when the request sets none of
        its own, the task's ``default_max_output_tokens``, else the model's
        ``default_max_output_tokens`` (TASKGATE_CONFIG); ``None``: nothing added."""
        if metered is None:
            metered = task is not None and task.cost_limit_usd is not None
        if task is None or not metered or self.embeddings or self.route is None:
            return None
        if own_output_max(self.payload or {}) is not None or self.path not in OUTPUT_MAX_FIELD:
            return None
        default = task.default_max_output_tokens or self.route.default_max_output_tokens
        return None if default is None else (OUTPUT_MAX_FIELD[self.path], default)

    def reservation_usd(self, task: Task | None = None, anchor: Anchor | None = None,
                        metered: bool | None = None) -> Decimal:
        """The worst-case cost (:mod:`app.admission.cost`): the smaller of the byte bound
        and the ``anchor``'s bound (:mod:`app.admission.anchor`) for the input; call only
        when :meth:`unpriced` is ``None`` (``metered``: as for :meth:`added_output_max`)."""
        assert self.route is not None and self.route.price is not None
        output = self._output_bound(task, metered)
        assert output is not None
        return reservation_usd(self.route.price, self.input_bound(anchor), output,
                               one_hour=one_hour_cache(self.body, self.payload))

    def input_bound(self, anchor: Anchor | None = None) -> int:
        """Input tokens reserved: the byte bound, or the anchored bound when smaller."""
        bound = input_token_bound(self.body)
        history = self.history if anchor is not None else None
        anchored = None if history is None else anchored_tokens(history, anchor, REQUEST_OVERHEAD_TOKENS,
                                                                MEDIA_PART_TOKENS)
        return bound if anchored is None else min(bound, anchored)

    def _output_bound(self, task: Task | None, metered: bool | None = None) -> int | None:
        assert self.route is not None
        added = self.added_output_max(task, metered)
        return output_token_bound(self.payload or {}, self.route.max_output_tokens, embeddings=self.embeddings,
                                  default_max=None if added is None else added[1])


def charge_for(route: Route | None, body: bytes, payload: Mapping[str, Any], *,
               embeddings: bool = False, what: str = "", path: str = "") -> Charge:
    """The charge of a request to ``path`` routed by ``route`` whose JSON body is
    ``body``/``payload``."""
    if route is not None:
        what = f"model '{route.requested_model}' (provider {route.provider_name})"
    return Charge(route, body, payload, embeddings, what or "this request", path)


def model_allowed(allowed: Sequence[str] | None, model: str | None) -> bool:
    """Whether ``model`` matches one of the task's ``allowed_models`` globs (``None``:
    every model is allowed; a request without a model is allowed only then)."""
    if allowed is None:
        return True
    return model is not None and any(fnmatch.fnmatchcase(model, pattern) for pattern in allowed)


def charge_refusal(task: Task, charge: Charge, *, metered: bool | None = None) -> GatewayError | None:
    """403 when the task cannot take this request for a pricing reason, else ``None``:
    ``model_not_allowed`` (not in ``allowed_models``), ``price_unknown`` (a dollar
    ceiling applies and the request cannot be priced). ``metered`` says whether a dollar
    ceiling applies (the task's own or one of its budgets'); default: the task has a
    ``cost_limit_usd``."""
    if not model_allowed(task.allowed_models, charge.model):
        allowed = ", ".join(task.allowed_models or ()) or "none"
        return GatewayError(403, "invalid_request_error", "model_not_allowed",
                            f"Task '{task.id}' may not use model '{charge.model}' (allowed_models: "
                            f"{allowed}). Nothing was forwarded or counted.", {"x-should-retry": "false"})
    if metered is None:
        metered = task.cost_limit_usd is not None
    unpriced = charge.unpriced(task, metered) if metered else None
    if unpriced is not None:
        if unpriced == OUTPUT_UNBOUNDED:
            fix = ("set max_tokens (max_completion_tokens, max_output_tokens) in the request, "
                   "default_max_output_tokens for the task, or max_output_tokens or "
                   "default_max_output_tokens for the model in TASKGATE_CONFIG")
        else:
            fix = "add a price for it (models[].price in TASKGATE_CONFIG)"
        return GatewayError(403, "invalid_request_error", "price_unknown",
                            f"Task '{task.id}' has a cost limit (its own or its budget's) and taskgate cannot "
                            f"bound the cost of "
                            f"{charge.what}: {fix}. Nothing was forwarded or counted.",
                            {"x-should-retry": "false"})
    return None
