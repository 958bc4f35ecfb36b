"""The admin API's one check: ``Authorization: Bearer <TASKGATE_ADMIN_TOKEN>``.

Every admin router depends on :func:`require_admin` (``dependencies=[Depends(require_admin)]``);
a missing or wrong token is 401 ``unauthorized`` in the admin error shape
(:mod:`app.admin.errors`), with ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import secrets

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.admin.errors import AdminError

_bearer = HTTPBearer(auto_error=False)


def require_admin(request: Request,
                  credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """Pass when the bearer token equals the admin token (compared in constant time);
    raises 401 :class:`AdminError` otherwise."""
    expected = request.app.state.settings.admin_token
    if credentials is None or not secrets.compare_digest(credentials.credentials.encode(),
                                                         expected.encode()):
        raise AdminError(401, "unauthorized",
                         "Missing or wrong admin token (Authorization: Bearer <TASKGATE_ADMIN_TOKEN>).",
                         headers={"WWW-Authenticate": "Bearer"})
