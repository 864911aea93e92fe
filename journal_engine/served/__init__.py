"""The served broker: ``journal-engine serve-stomp``, a STOMP 1.0/1.1/1.2 server on one event loop.

One asyncio loop (uvloop's when installed) owns one :class:`~journal_engine.Broker`: no thread per
connection, no lock of the server's own, no watcher threads. The package, one job a module:

* ``stomp.py``: the protocol's rules apart from the grammar (the agreed version and heart-beats,
  ProtocolError); the frames themselves are read and written by ``integrations/stomp_frames.py``;
* ``messages.py``: a SEND kept as a broker message, a broker message sent as a MESSAGE frame;
* ``destinations.py``: queues, exchanges (the kombu transport's), dead letters, control requests;
* ``subscriptions.py``: subscriptions, prefetch and back-pressure, the dispatch of messages to them;
* ``turn.py``: the group-commit turn (the SENDs, ACKs and NACKs of every connection in one loop turn
  are appended, one sync covers them, then the RECEIPTs and MESSAGEs go out, one write a connection);
* ``connection.py``: one client's connection (the asyncio protocol);
* ``server.py``: the listening socket, the loop, the listening line, the clean stop on SIGTERM.

docs/integrations.md describes it from the outside; ``journal_engine.integrations.coilmq`` remains
the example of our store inside another broker (coilmq).
"""
from __future__ import annotations

from .server import ServedBroker, serve

__all__ = ["serve", "ServedBroker"]
