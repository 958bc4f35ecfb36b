"""The gateway's own stop reasons: the ``stop_reason`` codes it writes when it stops a task.

A task's ``stop_reason`` (``tasks.stop_reason``, ``task_stopped`` refusals, the
``stopped`` event) is one of :data:`StopReason`, or an operator's own code given to
``POST /admin/tasks/{id}/stop`` (so :attr:`app.task.Task.stop_reason` stays ``str``).
The values are the wire's and the database's; this module only names them. Pure.
"""

from __future__ import annotations

from typing import Literal, get_args

StopReason = Literal[
    # the task's limits (app.admission.limits; repeated_stalls: app.proxy.accounting)
    "request_limit", "token_limit", "max_duration", "cost_limit", "repeated_stalls",
    # the loop guard's detector (app.guard.detector)
    "repeated_tool_call", "tool_call_cycle", "repeated_tool_failure", "tool_call_limit",
    "repeated_empty_result", "conversation_tool_call_limit",
    # a conversation's rules (app.guard.conversation_rules) and the soft rules (app.guard.strike_rules)
    "conversation_request_limit", "conversation_max_duration", "repeated_response", "repeated_output",
    "no_progress",
    # an operator's stop without a code of its own (app.admin)
    "manual",
]
"""A stop reason the gateway writes itself."""

#: Every :data:`StopReason`, e.g. the ``reason`` label values of the metrics.
STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))
