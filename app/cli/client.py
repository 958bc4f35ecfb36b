"""The admin API over HTTP, for the CLI (so it works against a remote gateway too).

:func:`connect` picks the gateway URL (``--url``, ``TASKGATE_URL``, else the local
gateway at ``TASKGATE_HOST``/``TASKGATE_PORT``) and the admin token
(``TASKGATE_ADMIN_TOKEN``, else the embedded default's token file for a local gateway).
Every failure becomes :class:`AdminError` with one line: the API's own message, or
what went wrong on the way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.console.admin_token import FILE_NAME
from app.settings import Settings

#: A JSON object as the admin API answers it (decoded by httpx): field names to values.
JsonObject = dict[str, Any]

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


class AdminError(Exception):
    """One readable line: ``HTTP 404: No task with id 'x'.`` or a connection problem."""


def default_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    return os.environ.get("TASKGATE_URL") or f"http://{host}:{settings.port}"


def admin_token(url: str, settings: Settings) -> str | None:
    """``TASKGATE_ADMIN_TOKEN``, else (for a gateway on this machine) the embedded
    default's token file in the data directory."""
    if settings.admin_token:
        return settings.admin_token
    if urlsplit(url).hostname in _LOCAL_HOSTS:
        path = Path(settings.data_dir).expanduser() / FILE_NAME
        if path.is_file():
            return path.read_text().strip() or None
    return None


def error_message(response: httpx.Response) -> str:
    """The API's message from an error response (``{"error": {"message", ...}}``, see
    :mod:`app.admin.errors`), on one line."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else None
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {response.status_code}: {' '.join(str(message or response.text).split())}"


class AdminClient:
    """Thin wrapper over ``/admin``; methods return the decoded JSON."""

    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s,
                                 trust_env=False)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise AdminError(f"cannot reach taskgate at {self.url} ({type(exc).__name__}: {exc})") from None
        if r.status_code >= 400:
            raise AdminError(error_message(r))
        return r.json() if r.content else None

    def json_object(self, method: str, path: str, **kwargs: Any) -> JsonObject:
        """:meth:`request` for an answer that is one JSON object; :class:`AdminError`
        for any other answer."""
        body = self.request(method, path, **kwargs)
        if not isinstance(body, dict):
            raise AdminError(f"{method} {path}: expected a JSON object, got {type(body).__name__}")
        return body

    def json_rows(self, path: str, **kwargs: Any) -> list[JsonObject]:
        """The ``data`` list of a ``GET`` answer (``{"data": [...]}``); :class:`AdminError`
        for any other answer."""
        data = self.json_object("GET", path, **kwargs).get("data")
        if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
            raise AdminError(f"GET {path}: expected a list of objects in 'data'")
        return data

    def tasks(self, status: str | None = None, limit: int = 100, budget: str | None = None) -> list[JsonObject]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if budget:
            params["budget"] = budget
        return self.json_rows("/admin/tasks", params=params)

    def task(self, task_id: str) -> JsonObject:
        return self.json_object("GET", f"/admin/tasks/{task_id}")

    def create(self, body: JsonObject) -> JsonObject:
        return self.json_object("POST", "/admin/tasks", json=body)

    def update(self, task_id: str, body: JsonObject) -> JsonObject:
        return self.json_object("PATCH", f"/admin/tasks/{task_id}", json=body)

    def stop(self, task_id: str, reason: str, message: str | None) -> JsonObject:
        return self.json_object("POST", f"/admin/tasks/{task_id}/stop",
                                 json={"reason": reason, "message": message})

    def resume(self, task_id: str, reason: str) -> JsonObject:
        return self.json_object("POST", f"/admin/tasks/{task_id}/resume", json={"reason": reason})

    def events(self, task_id: str) -> list[JsonObject]:
        return self.json_rows(f"/admin/tasks/{task_id}/events")

    def tool_calls(self, task_id: str) -> JsonObject:
        return self.json_object("GET", f"/admin/tasks/{task_id}/tool-calls")

    def delete(self, task_id: str) -> None:
        self.request("DELETE", f"/admin/tasks/{task_id}")


def connect(url: str | None) -> AdminClient:
    """A client for ``url`` (or the default), with the admin token found as above."""
    settings = Settings()  # read now: the environment of this command, not a cached one
    url = url or default_url(settings)
    return AdminClient(url, admin_token(url, settings))
