"""The per-process registry of open requests (pure bookkeeping; the cross-process
behaviour is in tests/test_stop_reaches_open_requests.py)."""

from __future__ import annotations

import time

from app.errors import task_stopped
from app.proxy.open_requests import OpenRequests

REFUSAL = task_stopped("t", "manual", "0 of 1 requests admitted, 0 tokens, 0 tool calls")


class Request:
    def __init__(self, ended: bool = False) -> None:
        self.ended = ended
        self.cut_with = None

    def cut(self, refusal):  # type: ignore[no-untyped-def]
        if self.ended or self.cut_with is not None:
            return False
        self.cut_with = refusal
        return True


def test_cut_reaches_every_open_request_of_the_task_and_only_those():
    reg = OpenRequests()
    a, b, other, done = Request(), Request(), Request(), Request(ended=True)
    for task, r in (("t", a), ("t", b), ("u", other), ("t", done)):
        reg.track(task, r)
    assert reg.count("t") == 3 and reg.count() == 4 and sorted(reg.task_ids()) == ["t", "u"]
    assert reg.cut("t", REFUSAL) == 2  # the finished one is not counted
    assert a.cut_with is REFUSAL and b.cut_with is REFUSAL and other.cut_with is None
    assert reg.cut("t", REFUSAL) == 0  # cutting twice cuts nothing more
    for r in (a, b, done):
        reg.untrack("t", r)
    reg.untrack("t", a)  # idempotent
    assert reg.task_ids() == ["u"]


def test_a_request_tracked_just_after_a_stop_was_heard_is_rechecked():
    """Admission read the task as active, then the stop's notification arrived before
    the request was tracked: the registry asks for the latch to be read again."""
    reg = OpenRequests(recent_s=0.2)
    suspects: list[str] = []
    reg.on_suspect = suspects.append
    reg.heard_stop("t")
    reg.track("t", Request())
    reg.track("u", Request())
    assert suspects == ["t"]
    time.sleep(0.25)
    reg.track("t", Request())  # the stop was heard too long ago: nothing to suspect
    assert suspects == ["t"]
