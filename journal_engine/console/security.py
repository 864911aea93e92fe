"""Who may read and who may change: logins, sessions, CSRF tokens, the rules of docs/console.md.

* With a users file (the server's ``--users``, the file STOMP logins are checked against,
  served/users.py) every page and ``/metrics`` need a login: a form's (a session cookie follows) or
  HTTP Basic credentials (for Prometheus's ``basic_auth``). Without one, reading is open to whoever
  reaches the address, which is 127.0.0.1 unless ``--host`` says otherwise.
* Redrive and delete always need a logged-in user: without a users file they are refused, saying so.
  A read-only console (``journal-engine console DIR``) refuses them whoever asks.
* Every form carries its session's CSRF token; a POST whose token is not the session's is refused
  (403) before anything is done. The session cookie is HttpOnly, SameSite=Strict, and Secure over TLS.
* A password is checked in a worker thread (scrypt takes about 50 ms: not on the event loop), and a
  refusal answers after SERVED_LOGIN_FAILURE_DELAY_S, as a refused STOMP CONNECT does.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ..limits import CONSOLE_SESSION_TTL_S, CONSOLE_SESSIONS_MAX, SERVED_LOGIN_FAILURE_DELAY_S

__all__ = ["Session", "Security", "COOKIE", "WRITE_NEEDS_USERS", "READ_ONLY_REFUSAL"]

COOKIE = "je_console"
WRITE_NEEDS_USERS = ("redrive and delete need a logged-in user, and this server has no users file: start it with "
                     "--users FILE (journal-engine users add FILE LOGIN) to allow them")
READ_ONLY_REFUSAL = ("this console is read-only (journal-engine console reads a stopped broker's directory and "
                     "never writes): redrive and delete from the served broker's console, serve-stomp --http")
_BASIC_CACHE_S = 60.0       # a Basic login checked once is not derived again for this long (a scrape a second)


@dataclass
class Session:
    token: str
    csrf: str
    user: str | None
    expires_at: float
    flash: list[str] = field(default_factory=list)


class Security:
    """Sessions and the rules above. ``users``: a served/users.py Users, or None; ``read_only``: the
    console never writes."""

    def __init__(self, users, *, read_only: bool, tls: bool) -> None:
        self.users = users
        self.read_only = read_only
        self.tls = tls
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._basic_ok: dict[tuple[str, bytes], float] = {}

    @property
    def login_required(self) -> bool:
        return self.users is not None

    def session_of(self, token: str | None) -> Session | None:
        session = self._sessions.get(token or "")
        if session is None:
            return None
        if session.expires_at < time.monotonic():
            del self._sessions[session.token]
            return None
        return session

    def new_session(self, user: str | None = None) -> Session:
        while len(self._sessions) >= CONSOLE_SESSIONS_MAX:
            self._sessions.popitem(last=False)
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), user,
                          time.monotonic() + CONSOLE_SESSION_TTL_S)
        self._sessions[session.token] = session
        return session

    def end(self, session: Session) -> None:
        self._sessions.pop(session.token, None)

    def csrf_ok(self, session: Session | None, token: str | None) -> bool:
        return session is not None and token is not None and hmac.compare_digest(session.csrf, token)

    def may_read(self, session: Session | None) -> bool:
        return not self.login_required or (session is not None and session.user is not None)

    def write_refusal(self, session: Session | None) -> str | None:
        """Why this session may not redrive or delete, or None when it may."""
        if self.read_only:
            return READ_ONLY_REFUSAL
        if self.users is None:
            return WRITE_NEEDS_USERS
        if session is None or session.user is None:
            return "log in first: redrive and delete need a logged-in user"
        return None

    async def check_password(self, login: str, password: str) -> bool:
        """Whether the users file holds this login and password (derived in a worker thread); a refusal
        returns after SERVED_LOGIN_FAILURE_DELAY_S."""
        if self.users is None:
            return False
        loop = asyncio.get_running_loop()
        ok = await loop.run_in_executor(None, self.users.check, login, password)
        if not ok:
            await asyncio.sleep(SERVED_LOGIN_FAILURE_DELAY_S)
        return ok

    async def basic_user(self, header: str | None) -> str | None:
        """The login of a valid ``Authorization: Basic`` header, else None."""
        if self.users is None or not header or not header.startswith("Basic "):
            return None
        try:
            login, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        key = (login, hashlib.sha256(password.encode("utf-8")).digest())
        if self._basic_ok.get(key, 0.0) > time.monotonic():
            return login
        if not await self.check_password(login, password):
            return None
        if len(self._basic_ok) >= CONSOLE_SESSIONS_MAX:
            self._basic_ok.clear()
        self._basic_ok[key] = time.monotonic() + _BASIC_CACHE_S
        return login
