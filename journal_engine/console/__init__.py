"""The operator's console: queues, messages, dead letters and journal health in a browser (docs/console.md).

One module a responsibility: ``data`` (what is shown, from a running broker or a stopped broker's
directory read-only), ``rates`` (the queues' counts sampled on the loop), ``security`` (logins,
sessions, CSRF, who may change what), ``pages`` (the templates and the reports' plots), ``plots``
(inline SVG drawn on the server) and ``app`` (the aiohttp routes, and how the console is served:
beside STOMP by ``serve-stomp --http``, read-only by ``journal-engine console``). The templates
and static files are package data: nothing is fetched from elsewhere.

It needs aiohttp and Jinja2 (dependencies of the package).
"""
from __future__ import annotations

from .app import Console, serve_read_only, served_console, start_console
from .data import LiveSource, StoredSource

__all__ = ["Console", "LiveSource", "StoredSource", "serve_read_only", "served_console", "start_console"]
