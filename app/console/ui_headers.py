"""Security headers on the dashboard (``/ui``): what the browser may load and that no
other site may frame it.

- ``content-security-policy``: scripts, styles, images and API calls from the gateway's
  own origin only (styles may also be set inline: the chart library sizes its canvas
  that way), no plugins, no ``<base>`` rewriting, ``frame-ancestors 'none'``;
- ``x-frame-options: DENY`` (for browsers without ``frame-ancestors``),
  ``x-content-type-options: nosniff``, ``referrer-policy: no-referrer``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)


class SecureHeaders:
    """ASGI wrapper adding :data:`HEADERS` to every HTTP response of ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in HEADERS if h[0] not in names)]
            await send(message)
        await self.app(scope, receive, send_with_headers)
