"""The dashboard's protections: security headers, same-origin forms, and notices from a fixed set.

* **Headers.** Every response of the service carries :data:`SECURITY_HEADERS`:
  a Content-Security-Policy that loads styles, scripts and images from the
  service itself only, runs no inline script or style, and lets no other
  site frame a page (``frame-ancestors 'none'``: a framed job page cannot
  be clicked into cancelling); ``X-Content-Type-Options: nosniff``; and a
  Referrer-Policy that sends no path (job ids) to other sites.
* **Forms.** A state-changing form (log in, log out, cancel, reprioritize)
  is accepted only from the dashboard's own pages: its ``Origin`` header
  must name this very host (another loopback port is another origin), and
  where a browser sends no ``Origin``, the form must carry the
  :func:`form_token` of the session that rendered it. Anything else: 403.
  The token is an HMAC keyed by the session's random ``flotilla_csrf``
  cookie (HttpOnly, SameSite=Strict) over the user's name and login cookie,
  so it is bound to that browser and that user, needs no server secret and
  holds across API replicas.
* **Notices.** A page shows a notice only from :data:`NOTICES`, chosen by a
  code in the query string; the query string never supplies the text.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "flotilla_csrf"
FORM_FIELD = "csrf"

#: The policy every response carries (the dashboard's pages and /docs load their files from the service).
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "font-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
                           "frame-ancestors 'none'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),   # frame-ancestors for browsers that predate CSP level 2
)

#: Notice code (``?done=CODE``) -> its text; ``{priority}`` is the job's priority as stored.
NOTICES = {"cancel": "cancel requested", "priority": "priority set to {priority}"}


class SecurityHeaders:
    """ASGI middleware: adds :data:`SECURITY_HEADERS` to every HTTP response that does not set them itself."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in SECURITY_HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def session_cookie(cookies: dict[str, str]) -> tuple[str, bool]:
    """The browser's ``flotilla_csrf`` value, or a new random one; ``(value, new)``."""
    value = cookies.get(CSRF_COOKIE)
    if value and 20 <= len(value) <= 64 and value.isascii() and value.replace("-", "").replace("_", "").isalnum():
        return value, False
    return secrets.token_urlsafe(32), True


def form_token(session: str, user: str, login: str | None) -> str:
    """The token a form rendered for this session and user carries (hex HMAC-SHA256)."""
    message = f"{user}\0{login or ''}".encode("utf-8", "surrogatepass")
    return hmac.new(session.encode(), message, hashlib.sha256).hexdigest()


def same_origin(origin: str, host: str | None) -> bool:
    """Does the ``Origin`` header name this host (``Host`` header, port included)? A malformed one does not."""
    try:
        parts = urlsplit(origin)
    except ValueError:   # "http://[::1": an unclosed IPv6 address
        return False
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == host.lower()


def form_refusal(origin: str | None, host: str | None, token: str | None, session: str | None, user: str,
                 login: str | None) -> str | None:
    """Why a state-changing form must be refused (403), or None when it comes from the dashboard itself."""
    if origin is not None:
        if same_origin(origin, host):
            return None
        return f"form refused: it came from another site (Origin {origin[:100]!r}, not this dashboard's)"
    if token and session and hmac.compare_digest(token, form_token(session, user, login)):
        return None
    return "form refused: no Origin header and no valid form token (reload the page and try again)"


def notice(code: str | None, job: dict) -> str | None:
    """The text of notice ``code`` for ``job``'s page, or None for a code not in :data:`NOTICES`."""
    text = NOTICES.get(code or "")
    return text.format(priority=job["priority"]) if text is not None else None


__all__ = ["CONTENT_SECURITY_POLICY", "CSRF_COOKIE", "FORM_FIELD", "NOTICES", "SECURITY_HEADERS",
           "SecurityHeaders", "form_refusal", "form_token", "notice", "same_origin", "session_cookie"]
