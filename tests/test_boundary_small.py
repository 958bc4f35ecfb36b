"""The smaller items of issue 21 (item 9): Slack text escaping, dashboard security
headers, the data directory and admin token under a permissive umask, ``\\u``-escaped
key redaction, the open-metrics start-up warning."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from app.console import admin_token
from app.console.webhook import slack_escape, stop_payload
from app.db.embedded import private_dir
from app.proxy.redact import MASK, Redactor
from app.startup import open_metrics_warning
from tests.task_values import new_row


def test_slack_text_escapes_what_slack_would_read_as_markup():
    assert slack_escape("<!channel> & <https://evil|docs>") == "&lt;!channel&gt; &amp; &lt;https://evil|docs&gt;"
    row = {**new_row(id="t-1", status="stopped"), "event_reason": "repeated_tool_call",
           "event_detail": {"tool_name": "<!channel>"}, "event_at": datetime(2026, 12, 1, tzinfo=timezone.utc)}
    payload = stop_payload(row)
    assert "<" not in payload["text"] and ">" not in payload["text"]
    assert payload["stop_detail"]["tool_name"] == "<!channel>"  # the JSON fields are the values as they are


def test_the_dashboard_sends_csp_and_frame_headers(gateway):
    r = httpx.get(gateway.url + "/ui/")
    assert r.status_code == 200
    csp = r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(gateway.url + "/ui/app.js").headers["x-frame-options"] == "DENY"


def test_data_dir_and_admin_token_are_private_under_a_permissive_umask(tmp_path: Path):
    old = os.umask(0)
    try:
        data = tmp_path / "data"
        private_dir(data)
        token, created = admin_token.load_or_create(data / admin_token.FILE_NAME)
    finally:
        os.umask(old)
    assert created and token.startswith("tgadm-")
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / admin_token.FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert admin_token.load_or_create(data / admin_token.FILE_NAME) == (token, False)
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o777)
    os.chmod(loose, 0o777)
    private_dir(loose)
    assert loose.stat().st_mode & 0o022 == 0


def test_a_symlinked_admin_token_is_not_followed(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.write_text("attacker-chosen\n")
    link = tmp_path / "data" / admin_token.FILE_NAME
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        admin_token.load_or_create(link)
    dangling = tmp_path / "data2" / admin_token.FILE_NAME
    dangling.parent.mkdir()
    dangling.symlink_to(tmp_path / "created-through-the-link")
    with pytest.raises(OSError):
        admin_token.load_or_create(dangling)
    assert not (tmp_path / "created-through-the-link").exists()
    assert target.read_text() == "attacker-chosen\n"


@pytest.mark.parametrize("hexdigits", ["{:04x}", "{:04X}"])
def test_a_fully_u_escaped_key_is_redacted(hexdigits):
    key = "sk-proj-0123456789abcdefghij"
    escaped = "".join("\\u" + hexdigits.format(ord(c)) for c in key)
    body = json.dumps({"error": {"message": "bad key"}})[:-2] + f', "key": "{escaped}"' + "}}"
    assert json.loads(body)["error"]["key"] == key  # what a client would read
    out = Redactor([key])(body.encode())
    assert MASK in out and key not in json.dumps(json.loads(out))


def test_open_metrics_are_announced_when_the_host_is_not_loopback():
    assert open_metrics_warning("0.0.0.0", None) is not None
    assert "TASKGATE_METRICS_TOKEN" in open_metrics_warning("10.0.0.5", None)
    assert open_metrics_warning("example.internal", None) is not None
    for quiet in (("127.0.0.1", None), ("::1", None), ("localhost", None), ("0.0.0.0", "t0ken")):
        assert open_metrics_warning(*quiet) is None
