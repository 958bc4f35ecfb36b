"""``taskgate run``'s last line after the agent exits (:func:`app.cli.run.remaining_line`).

Found by running opencode, Codex, smolagents and others under ``taskgate run`` against a
looping scripted upstream: the task stopped on ``repeated_tool_call`` after 5 of its 1000
requests, and the last line said ``taskgate: remaining 995 requests`` although the task
will not be forwarded another request until an operator resumes it (a refused request
carries no ``x-taskgate-remaining-*`` header at all). Marked xfail until fixed; strict, so
the fix turns this red until the marker goes."""

from __future__ import annotations

from app.cli.run import remaining_line


def _task(status: str) -> dict[str, object]:
    return {"id": "t", "status": status, "stop_reason": "repeated_tool_call" if status == "stopped" else None,
            "request_limit": 1000, "admitted_requests": 5, "token_limit": None, "total_tokens": 6066,
            "cost_limit_usd": None, "cost_usd": 0, "reserved_usd": 0}


def test_an_active_task_has_its_requests_left() -> None:
    assert remaining_line(_task("active"), []) == "taskgate: remaining 995 requests"


def test_a_stopped_task_has_nothing_left_until_resumed() -> None:
    line = remaining_line(_task("stopped"), [])
    assert line is None
