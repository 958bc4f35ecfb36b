"""Where the admin token comes from when ``TASKGATE_ADMIN_TOKEN`` is not set.

With the embedded default database the generated token is kept in
``<data_dir>/admin_token`` (file mode 0600), so it survives restarts like the data it
guards; with an external database (no data directory of its own) a token is generated
for each run. An explicit ``TASKGATE_ADMIN_TOKEN`` always wins.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from app.settings import Settings

FILE_NAME = "admin_token"


def load_or_create(path: Path) -> tuple[str, bool]:
    """The token stored at ``path``, or a new one written there with mode 0600 (its
    directory created 0700 whatever the umask). Returns ``(token, created)``. Raises
    ``OSError`` when the file cannot be written, and when ``path`` is a symbolic link
    (never followed: it could point the token anywhere)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = "tgadm-" + secrets.token_urlsafe(24)
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, 0o600)
    except FileExistsError:
        if path.is_symlink():
            raise OSError(f"{path} is a symbolic link; taskgate does not follow it for the admin token") from None
        fd = os.open(path, os.O_RDWR | flags)
        with os.fdopen(fd, "r+") as f:
            if os.fstat(f.fileno()).st_mode & 0o077:
                os.fchmod(f.fileno(), 0o600)
            stored = f.read().strip()
            if stored:
                return stored, False
            f.seek(0)
            f.write(token + "\n")
            f.truncate()
        return token, True
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token, True


def ensure(settings: Settings) -> str | None:
    """Fill ``settings.admin_token`` when unset; returns a line telling the operator
    where the token is (``None`` when it was set explicitly). Never prints the token
    of a file; prints a per-run token once (there is nowhere else to find it)."""
    if settings.admin_token:
        return None
    if settings.database_url is None:
        path = Path(settings.data_dir).expanduser().resolve() / FILE_NAME
        token, created = load_or_create(path)
        settings.admin_token = token
        verb = "generated the admin token and saved it to" if created else "admin token read from"
        return f"taskgate: TASKGATE_ADMIN_TOKEN is not set; {verb} {path} (mode 0600)"
    settings.ensure_admin_token()
    return (f"taskgate: TASKGATE_ADMIN_TOKEN is not set; generated admin token for this run:\n"
            f"  {settings.admin_token}")
