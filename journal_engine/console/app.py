"""The console's web application (aiohttp): its routes, and how it is served.

``Console(source, ...)`` answers the pages of docs/console.md from a source (data.py: the served
broker's, or a stopped broker's directory read-only) under the rules of security.py. It is served

* by ``serve-stomp --http PORT`` from the served broker's own event loop (served/server.py): the
  pages ask the same Broker the STOMP connections use, between their turns; or
* by ``journal-engine console DIR --port N`` (:func:`serve_read_only`), read-only.

``/metrics`` is answered when the console is given a ``metrics`` callable (the served broker's
collectors, journal_engine.metrics) under the same login rule as the pages.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import sys
import time
from collections import deque
from urllib.parse import urlencode

from aiohttp import web

from ..errors import ConfigError, SelectorError, UnknownQueueError
from ..served.network import listening_socket, new_event_loop, tls_context
from ..served.users import Users
from ..limits import (CONSOLE_ACTIONS_KEPT, CONSOLE_HEALTH_CACHE_S, CONSOLE_PAGE_MESSAGES_DEFAULT,
                      CONSOLE_PAGE_MESSAGES_MAX, REDRIVES_MAX_DEFAULT)
from .data import StoredSource, group_dead_letters, journal_health
from .pages import STATIC_DIRECTORY, environment, read_report
from .plots import bar_plot, line_plot
from .rates import Rates
from .security import COOKIE, Security, Session

__all__ = ["Console", "start_console", "served_console", "serve_read_only"]

_SESSION_KEY = "journal_engine.console.session"     # where the guard keeps a request's session
_PUBLIC_PATHS = ("/login", "/static/")
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


class Console:
    """The application of one source (see the module docstring). ``users``: served/users.py Users or
    None; ``tls``: whether it is served over TLS (the session cookie is Secure then); ``reports``:
    paths of crash-test and bench ``--json`` reports the health page plots; ``metrics``: a callable
    returning (body, content type) for ``/metrics``; ``log``: where actions are written (the server's
    stderr)."""

    def __init__(self, source, *, users=None, tls: bool = False, reports=(), metrics=None, log=None) -> None:
        self.source = source
        self.security = Security(users, read_only=source.read_only, tls=tls)
        self.reports = list(reports)
        self.metrics = metrics
        self.log = log or sys.stderr
        self.rates = Rates(source) if not source.read_only else None
        self.actions: deque[dict] = deque(maxlen=CONSOLE_ACTIONS_KEPT)
        self.templates = environment()
        self._health: tuple[float, dict] | None = None
        self._health_task: asyncio.Future | None = None

    # ------------------------------------------------------------------------------ the application
    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=1024 * 1024)
        app.add_routes([
            web.get("/", self._root), web.get("/login", self._login_page), web.post("/login", self._login),
            web.post("/logout", self._logout),
            web.get("/queues", self._queues), web.get("/api/queues", self._api_queues),
            web.get("/queue", self._queue),
            web.get("/messages", self._messages), web.get("/message", self._message),
            web.get("/dead-letters", self._dead_letters),
            web.post("/dead-letters/redrive", self._redrive), web.post("/dead-letters/delete", self._delete),
            web.get("/health", self._health_page),
            web.get("/metrics", self._metrics),
            web.static("/static", STATIC_DIRECTORY, append_version=False),
        ])
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, _app) -> None:
        if self.rates is not None:
            self.rates.start()

    async def _on_cleanup(self, _app) -> None:
        if self.rates is not None:
            await self.rates.stop()

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        """The session, the login rule, CSRF on every POST, and the security headers of every answer."""
        session = self.security.session_of(request.cookies.get(COOKIE))
        fresh = session is None
        if fresh:
            session = self.security.new_session()
        request[_SESSION_KEY] = session
        public = request.path == "/login" or request.path.startswith("/static/")
        try:
            if request.method == "POST":
                form = await request.post()
                request["form"] = form
                if not self.security.csrf_ok(session, form.get("csrf")):
                    raise web.HTTPForbidden(text="refused: the form's CSRF token is not this session's "
                                                 "(reload the page and try again)")
            if not public and not self.security.may_read(session):
                user = await self.security.basic_user(request.headers.get("Authorization"))
                if user is None:
                    if request.path in ("/metrics",) or request.path.startswith("/api/"):
                        raise web.HTTPUnauthorized(text="log in: this console needs a user of its users file",
                                                   headers={"WWW-Authenticate": 'Basic realm="journal-engine"'})
                    raise web.HTTPSeeOther("/login?" + urlencode({"next": request.path_qs}))
            response = await handler(request)
        except web.HTTPException as answer:
            response = answer
            self._secure(response, session, fresh, request)
            raise
        self._secure(response, session, fresh, request)
        return response

    def _secure(self, response, session: Session, fresh: bool, request) -> None:
        for name, value in _HEADERS.items():
            if request.path.startswith("/static/") and name == "Cache-Control":
                continue
            response.headers.setdefault(name, value)
        if fresh:
            response.set_cookie(COOKIE, session.token, httponly=True, samesite="Strict", secure=self.security.tls,
                                path="/")

    def _render(self, request: web.Request, template: str, **values) -> web.Response:
        session: Session = request[_SESSION_KEY]
        flash, session.flash = session.flash, []
        text = self.templates.get_template(template).render(
            session=session, csrf=session.csrf, user=session.user, read_only=self.source.read_only,
            login_required=self.security.login_required, may_write=self.security.write_refusal(session) is None,
            write_refusal=self.security.write_refusal(session), flash=flash, path=request.path,
            directory=self.source.directory, has_metrics=self.metrics is not None, **values)
        return web.Response(text=text, content_type="text/html", charset="utf-8")

    # ------------------------------------------------------------------------------ login
    async def _root(self, _request):
        raise web.HTTPSeeOther("/queues")

    async def _login_page(self, request):
        return self._render(request, "login.html", next=_local(request.query.get("next")), refused=False)

    async def _login(self, request):
        form = request["form"]
        session: Session = request[_SESSION_KEY]
        next_path = _local(form.get("next"))
        if self.security.users is None:
            session.flash.append("this server has no users file: there is nothing to log in to")
            raise web.HTTPSeeOther(next_path)
        login, password = form.get("login", ""), form.get("password", "")
        if not await self.security.check_password(login, password):
            response = self._render(request, "login.html", next=next_path, refused=True)
            response.set_status(401)
            return response
        self.security.end(session)
        fresh = self.security.new_session(login)
        response = web.HTTPSeeOther(next_path)
        response.set_cookie(COOKIE, fresh.token, httponly=True, samesite="Strict", secure=self.security.tls, path="/")
        raise response

    async def _logout(self, request):
        self.security.end(request[_SESSION_KEY])
        response = web.HTTPSeeOther("/login" if self.security.login_required else "/queues")
        response.del_cookie(COOKIE, path="/")
        raise response

    # ------------------------------------------------------------------------------ queues
    def _queue_rows(self) -> list[dict]:
        rows = []
        for row in self.source.queues():
            rates = self.rates.rates(row.name) if self.rates is not None else None
            series = self.rates.series(row.name) if self.rates is not None else None
            rows.append({"row": row, "rates": rates, "series": series})
        return rows

    async def _queues(self, request):
        return self._render(request, "queues.html", rows=self._queue_rows(),
                            sample_period_s=self.rates.period_s if self.rates else None,
                            loaded_at=getattr(self.source, "loaded_at", None))

    async def _api_queues(self, _request):
        result = []
        for entry in self._queue_rows():
            row = entry["row"]
            result.append({"name": row.name, "address": row.address, "depth": row.depth, "scheduled": row.scheduled,
                           "delivering": row.delivering, "consumers": row.consumers, "added": row.added,
                           "acknowledged": row.acknowledged, "killed": row.killed, "expired": row.expired,
                           "delivered": row.delivered, "redelivered": row.redelivered,
                           "rolled_back": row.rolled_back, "dead_letters": row.dead_letters,
                           "rates": entry["rates"]})
        return web.json_response({"queues": result, "at": int(time.time() * 1000)},
                                 headers={"Cache-Control": "no-store"})

    async def _queue(self, request):
        name = request.query.get("name", "")
        rows = [entry for entry in self._queue_rows() if entry["row"].name == name]
        if not rows:
            raise web.HTTPNotFound(text=f"no queue {name!r}")
        entry = rows[0]
        plot = None
        if entry["series"] is not None and entry["series"]["send"]:
            step = self.rates.period_s
            count = len(entry["series"]["send"])
            plot = line_plot({label: [((i - count + 1) * step, value) for i, value in enumerate(entry["series"][key])]
                              for label, key in (("sent/s", "send"), ("acknowledged/s", "ack"),
                                                 ("dead-lettered/s", "dead"))},
                             title="rates over the last minutes", x_label="seconds before now", y_label="messages/s")
        return self._render(request, "queue.html", entry=entry, settings=self.source.settings(entry["row"].address),
                            plot=plot)

    # ------------------------------------------------------------------------------ messages
    async def _messages(self, request):
        queue = request.query.get("queue", "")
        filter_text = request.query.get("filter", "").strip() or None
        start = _int(request.query.get("start"), 0, 0)
        limit = _int(request.query.get("limit"), CONSOLE_PAGE_MESSAGES_DEFAULT, 1, CONSOLE_PAGE_MESSAGES_MAX)
        problem = None
        page = None
        try:
            page = self.source.page(queue, start, limit, filter_text)
            scheduled, more_scheduled = self.source.scheduled(queue, limit)
        except UnknownQueueError:
            raise web.HTTPNotFound(text=f"no queue {queue!r}") from None
        except SelectorError as error:
            problem = f"the filter is not a selector: {error}"
            scheduled, more_scheduled = [], False
        return self._render(request, "messages.html", queue=queue, page=page, filter=filter_text or "",
                            limit=limit, problem=problem, queues=self.source.queue_names(), scheduled=scheduled,
                            more_scheduled=more_scheduled)

    async def _message(self, request):
        queue = request.query.get("queue", "")
        message_id = _int(request.query.get("id"), -1, 0)
        near = _int(request.query.get("at"), 0, 0)
        try:
            message = self.source.message(queue, message_id, near)
        except UnknownQueueError:
            raise web.HTTPNotFound(text=f"no queue {queue!r}") from None
        if message is None:
            raise web.HTTPNotFound(text=f"message {message_id} is no longer waiting in {queue!r} (acknowledged, "
                                        "in delivery, moved or scheduled)")
        return self._render(request, "message.html", message=message, queue=queue,
                            queues=self.source.queue_names())

    # ------------------------------------------------------------------------------ dead letters
    async def _dead_letters(self, request):
        rows = [row for row in self.source.queues() if row.dead_letter_queue]
        queue = request.query.get("queue") or next((row.name for row in rows if row.depth), None) or \
            (rows[0].name if rows else None)
        filter_text = request.query.get("filter", "").strip() or None
        messages, truncated, problem = [], False, None
        if queue is not None:
            try:
                messages, truncated = self.source.dead_letters(queue, filter_text)
            except UnknownQueueError:
                raise web.HTTPNotFound(text=f"no queue {queue!r}") from None
            except SelectorError as error:
                problem = f"the filter is not a selector: {error}"
        groups = group_dead_letters(messages)
        plots = []
        if groups:
            plots.append(bar_plot([(f"{group['reason']} from {group['origin']}", float(group["count"]))
                                   for group in groups], title="dead letters by reason and origin"))
            times = sorted(t for group in groups for t in group["times"])
            if times:
                plots.append(_over_time(times))
        return self._render(request, "dead_letters.html", dlqs=rows, queue=queue, filter=filter_text or "",
                            messages=messages[:CONSOLE_PAGE_MESSAGES_MAX], shown_max=CONSOLE_PAGE_MESSAGES_MAX,
                            total=len(messages), truncated=truncated, groups=groups, plots=plots, problem=problem,
                            actions=list(self.actions), queues=self.source.queue_names(),
                            max_redrives=REDRIVES_MAX_DEFAULT)

    def _write_form(self, request) -> tuple[Session, str, str | None, list[int] | None, dict]:
        """The checked form of a redrive or delete: refusals (login, read-only) before anything else."""
        session: Session = request[_SESSION_KEY]
        refusal = self.security.write_refusal(session)
        if refusal is not None:
            raise web.HTTPForbidden(text=f"refused: {refusal}")
        form = request["form"]
        queue = form.get("queue", "")
        scope = form.get("scope", "selected")
        filter_text = (form.get("filter") or "").strip() or None
        ids = None
        if scope == "selected":
            try:
                ids = sorted({int(value) for value in form.getall("id", [])})
            except ValueError:
                raise web.HTTPBadRequest(text="a message id is not a number") from None
            if not ids:
                session.flash.append("nothing selected: tick the messages first, or choose \"everything matching "
                                     "the filter\"")
                raise web.HTTPSeeOther(_dead_letters_url(queue, filter_text))
            filter_text = None
        elif scope != "filter":
            raise web.HTTPBadRequest(text=f"scope {scope!r}: use selected or filter")
        return session, queue, filter_text, ids, form

    async def _redrive(self, request):
        session, queue, filter_text, ids, form = self._write_form(request)
        to_queue = form.get("to") or None
        try:
            max_redrives = int(form.get("max_redrives") or REDRIVES_MAX_DEFAULT)
            result = self.source.redrive(queue, to_queue=to_queue, filter=filter_text, message_ids=ids,
                                         max_redrives=max_redrives)
        except (UnknownQueueError, SelectorError, ConfigError, ValueError) as error:
            session.flash.append(f"redrive refused: {error}")
            raise web.HTTPSeeOther(_dead_letters_url(queue, filter_text)) from None
        self._record(session, "redrive", queue, to_queue, filter_text, ids,
                     moved=[{"id": old, "new_id": new, "queue": target} for old, new, target in result.moved],
                     refused=[{"id": old, "why": why} for old, why in result.refused])
        session.flash.append(f"redriven from {queue}: {len(result.moved)} moved, {len(result.refused)} refused")
        raise web.HTTPSeeOther(_dead_letters_url(queue, filter_text))

    async def _delete(self, request):
        session, queue, filter_text, ids, _form = self._write_form(request)
        try:
            deleted = self.source.delete(queue, filter=filter_text, message_ids=ids)
        except (UnknownQueueError, SelectorError, ConfigError) as error:
            session.flash.append(f"delete refused: {error}")
            raise web.HTTPSeeOther(_dead_letters_url(queue, filter_text)) from None
        self._record(session, "delete", queue, None, filter_text, ids, deleted=deleted)
        session.flash.append(f"deleted from {queue}: {len(deleted)} messages")
        raise web.HTTPSeeOther(_dead_letters_url(queue, filter_text))

    def _record(self, session: Session, action: str, queue: str, to_queue, filter_text, ids, **outcome) -> None:
        """One action in the console's list and a line in the server's log (a redriven message also
        carries its trail, _JE_REDRIVE_*, broker/redrive.py)."""
        entry = {"time": int(time.time() * 1000), "user": session.user, "action": action, "queue": queue,
                 "to": to_queue, "filter": filter_text, "ids": ids, **outcome}
        self.actions.appendleft(entry)
        done = outcome.get("moved", outcome.get("deleted", []))
        print(f"journal-engine console: {session.user} {action} {queue}"
              + (f" -> {to_queue}" if to_queue else "") + (f" filter {filter_text!r}" if filter_text else "")
              + (f" ids {ids}" if ids is not None else "") + f": {len(done)} done"
              + (f", {len(outcome['refused'])} refused" if outcome.get("refused") else ""), file=self.log, flush=True)

    # ------------------------------------------------------------------------------ journal health
    async def _health_page(self, request):
        health = await self._journal_health()
        plots = []
        for part in health["parts"]:
            files = part["files"]
            if files:
                plots.append(bar_plot([(file["name"], 0.0) for file in files], title=f"{part['name']}: bytes a file",
                                      unit=" B", stacked=[("live", [float(f["live"]) for f in files]),
                                                          ("dead", [float(f["dead"]) for f in files])]))
        reports = [read_report(path) for path in self.reports]
        return self._render(request, "health.html", health=health, plots=plots, reports=reports)

    async def _journal_health(self) -> dict:
        """The analysis of the directory's files, made in a worker thread, reused CONSOLE_HEALTH_CACHE_S."""
        if self._health is not None and time.monotonic() - self._health[0] < CONSOLE_HEALTH_CACHE_S:
            return self._health[1]
        if self._health_task is None:
            loop = asyncio.get_running_loop()
            self._health_task = loop.run_in_executor(None, lambda: journal_health(
                self.source.directory, live_writer=not self.source.read_only))
        try:
            health = await asyncio.shield(self._health_task)
        finally:
            if self._health_task is not None and self._health_task.done():
                self._health_task = None
        self._health = (time.monotonic(), health)
        return health

    # ------------------------------------------------------------------------------ metrics
    async def _metrics(self, _request):
        if self.metrics is None:
            raise web.HTTPNotFound(text="/metrics is served by serve-stomp --http (a running broker's counts)")
        body, content_type = self.metrics()
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response


def _over_time(times: list[int]) -> object:
    """The dead letters counted up over their dead-letter times (seconds, or minutes past ten of them,
    before the newest)."""
    first, last = times[0], times[-1]
    unit_ms, unit = (60_000, "minutes") if last - first > 600_000 else (1000, "seconds")
    points = [((at - last) / unit_ms, float(count)) for count, at in enumerate(times, 1)]
    return line_plot({"dead letters so far": points}, title="dead letters over time",
                     x_label=f"{unit} before the newest", y_label="count")


def _dead_letters_url(queue: str, filter_text: str | None) -> str:
    query = {"queue": queue}
    if filter_text:
        query["filter"] = filter_text
    return "/dead-letters?" + urlencode(query)


def _local(path: str | None) -> str:
    """A path of this site to go to after a login (never another site's)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/queues"
    return path


def _int(text: str | None, default: int, low: int, high: int | None = None) -> int:
    try:
        value = int(text) if text is not None else default
    except ValueError:
        raise web.HTTPBadRequest(text=f"{text!r} is not a number") from None
    if value < low or (high is not None and value > high):
        raise web.HTTPBadRequest(text=f"{value} is out of range ({low} to {high if high is not None else 'any'})")
    return value


async def start_console(console: Console, sock: socket.socket, tls: ssl.SSLContext | None) -> web.AppRunner:
    """Serve ``console`` on the bound socket ``sock`` from the running loop; the runner (``await
    runner.cleanup()`` stops it)."""
    runner = web.AppRunner(console.application(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, ssl_context=tls).start()
    return runner


def served_console(reports=()):
    """What ``serve(..., http_port=..., console=...)`` (served/server.py) calls on its loop to serve the
    console of its broker on the bound socket, ``/metrics`` included: an async callable
    ``(served broker, socket, TLS context, users, settings origins) -> runner``. ``reports``: crash-test
    and bench JSON reports the health page plots (ConfigError now for one that is not a file)."""
    from ..metrics import registry_for, render
    from .data import LiveSource
    for path in reports:
        if not os.path.isfile(path):
            raise ConfigError("--report", path, "is not a file (a crash-test or bench --json report)")

    async def start(served, sock: socket.socket, tls: ssl.SSLContext | None, users, origins: dict) -> web.AppRunner:
        destinations = served.destinations
        source = LiveSource(destinations.broker, settings_origins=origins,
                            dead_letter_queue=destinations.dead_letter_queue)
        registry = registry_for(destinations.broker, served)
        console = Console(source, users=users, tls=tls is not None, reports=reports, metrics=lambda: render(registry))
        return await start_console(console, sock, tls)

    return start


def serve_read_only(directory: str, port: int, host: str = "127.0.0.1", *, users_path=None, tls_cert=None,
                    tls_key=None, reports=(), out=None) -> int:
    """``journal-engine console DIR``: the console of a stopped broker's directory, read-only, until
    SIGTERM or SIGINT; prints ``journal-engine console: listening on http(s)://HOST:PORT`` once it
    accepts connections. Returns the exit status (0)."""
    out = out or sys.stdout
    users = Users.read(users_path) if users_path is not None else None
    tls = tls_context(tls_cert, tls_key) if tls_cert is not None or tls_key is not None else None
    for path in reports:
        if not os.path.isfile(path):
            raise ConfigError("--report", path, "is not a file (a crash-test or bench --json report)")
    source = StoredSource(directory)
    sock = listening_socket(host, port, "journal-engine console")
    loop = new_event_loop()
    try:
        console = Console(source, users=users, tls=tls is not None, reports=reports)
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)

        async def run() -> None:
            runner = await start_console(console, sock, tls)
            bound_host, bound_port = sock.getsockname()[:2]
            print(f"journal-engine console: listening on {'https' if tls else 'http'}://{bound_host}:{bound_port} "
                  f"(read-only, {source.directory}, {f'{len(users)} users' if users is not None else 'no logins'})",
                  file=out, flush=True)
            try:
                await stop.wait()
            finally:
                await runner.cleanup()

        loop.run_until_complete(run())
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        loop.close()
        sock.close()
    return 0

