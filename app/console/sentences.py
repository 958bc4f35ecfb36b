"""Readable sentences for tasks and their events (pure functions over rows).

:func:`stop_message` is exactly the message a refused request of the task gets
(:func:`app.proxy.stop_watch.stop_refusal`, the refusal admission and the stop watcher
answer with), so the operator reads what the agent read. :func:`event_message` says in words what one
``task_events`` row records.
"""

from __future__ import annotations

from typing import Any, Mapping

from app.admission.limits import explain_stop
from app.proxy.stop_watch import stop_refusal


def stop_message(task: Mapping[str, Any]) -> str | None:
    """The sentence a request of this stopped task is refused with (its counters as they
    are now); ``None`` while the task is active. ``task`` is a ``tasks`` row."""
    if task.get("status") != "stopped":
        return None
    return stop_refusal(dict(task)).message


def event_message(kind: str, reason: str | None, detail: Mapping[str, Any] | None) -> str:
    """One sentence for a ``task_events`` row (``kind``, ``reason``, ``detail``)."""
    d = detail or {}
    if kind == "stopped":
        why = explain_stop(reason, d)
        return f"Stopped ({reason})" + (f": {why}." if why else ".")
    if kind == "resumed":
        return (f"Resumed by an operator ({reason}); it had stopped for "
                f"{d.get('previous_stop_reason')}.")
    if kind == "created":
        limits = ", ".join(f"{k}={v}" for k, v in d.items()
                           if k in ("request_limit", "token_limit", "max_duration_s", "tool_call_limit",
                                    "max_stalls") and v is not None)
        return "Created" + (f" with {limits}." if limits else ".")
    if kind == "limits_changed":
        before, after = d.get("before") or {}, d.get("after") or {}
        changes = ", ".join(f"{k} {before.get(k)} → {v}" for k, v in after.items())
        return f"Limits changed: {changes}." if changes else "Limits changed."
    if kind == "loop_warning":
        return (f"Loop guard warned the model: {d.get('tool_name', 'a tool')} repeated "
                f"{d.get('count', d.get('repeats', '?'))} times.")
    if kind == "stream_stalled":
        return f"Upstream stream stalled on {d.get('endpoint')} ({d.get('code')}); taskgate closed it."
    if kind == "stream_truncated":
        return f"Upstream stream on {d.get('endpoint')} ended without its terminal event ({d.get('code')})."
    if kind == "upstream_unreachable":
        return f"The upstream provider could not be reached for {d.get('endpoint')}."
    if kind == "cut_open_requests":
        return (f"The stop ({reason}) cut {d.get('cut')} open request(s) on {d.get('process')}, "
                f"{d.get('seconds_since_stopped')} s after the latch (heard by {d.get('path')}).")
    if kind == "upstream_timeout":
        return f"The upstream provider did not answer {d.get('endpoint')} in time."
    return kind.replace("_", " ").capitalize() + (f" ({reason})." if reason else ".")
