"""taskgate's own log lines: plain text or one JSON object per line.

``TASKGATE_LOG_FORMAT=json`` uses ``python-json-logger``; every line carries
``request_id`` (from :data:`app.request_ids.REQUEST_ID`, ``null`` outside a
request) and whatever ``extra`` the call site gave (``task_id``, ``reason``...).
Call sites never pass a token or a key.
"""

from __future__ import annotations

import logging

from pythonjsonlogger.json import JsonFormatter

from app.request_ids import REQUEST_ID

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s"


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (``-`` in text, ``null`` in JSON)."""

    def __init__(self, placeholder: str | None) -> None:
        super().__init__()
        self.placeholder = placeholder

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get() or self.placeholder
        return True


def formatter(log_format: str) -> logging.Formatter:
    """The formatter for ``text`` or ``json``."""
    if log_format == "json":
        return JsonFormatter(JSON_FIELDS, rename_fields={"asctime": "time", "levelname": "level",
                                                          "name": "logger"},
                             timestamp=False)
    return logging.Formatter(TEXT_FORMAT)


def configure(level: str, log_format: str = "text") -> None:
    """Send the ``app`` loggers (stops, refusals, stalls, upstream failures, the access
    log) to stderr at ``level`` in ``log_format``, unless the host application
    configured them already."""
    app_logger = logging.getLogger("app")
    if app_logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(log_format))
    handler.addFilter(RequestIdFilter(None if log_format == "json" else "-"))
    app_logger.addHandler(handler)
    app_logger.setLevel(level.upper())
