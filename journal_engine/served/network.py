"""What a served port needs before anything is served: the bound socket, the loop, TLS, the exposure rule.

Shared by serve-stomp (server.py) and the operator's console (journal_engine/console), which binds its
HTTP port with the same rules: a port in use is said naming host and port before anything is created;
a bind beyond loopback needs a users file or an explicit --allow-anonymous; TLS from PEM files named
when they cannot be read.
"""
from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
import ssl

from ..errors import AddressInUseError, ConfigError, JournalIOError

__all__ = ["new_event_loop", "listening_socket", "is_loopback", "check_exposure", "tls_context"]

_BACKLOG = 1024


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when uvloop is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def listening_socket(host: str, port: int, what: str = "serve-stomp") -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (port 0: any free port). AddressInUseError
    naming them when another program holds the port; JournalIOError for another refusal."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # a restart on the port of a server just killed must not wait for its TIME_WAIT connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise AddressInUseError(f"{what} cannot listen on {host}:{port}: another program uses that port; "
                                    "nothing was created", errno=error.errno,
                                    hint="stop that program, or choose another port (--port 0: any free one)") from None
        raise JournalIOError(f"{what} cannot listen on {host}:{port}: {error.strerror or error}; nothing was "
                             "created", errno=error.errno,
                             hint="check the host is an address of this machine and the port is yours to use") from None
    return sock


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False                            # a name: it may resolve to any address


def check_exposure(host: str, users_path, allow_anonymous: bool, option: str = "--host") -> None:
    """ConfigError (exit status 2) for a bind beyond loopback without --users nor --allow-anonymous:
    anyone who reaches the address could read and write every queue."""
    if users_path is None and not allow_anonymous and not is_loopback(host):
        raise ConfigError(option, host, "is not a loopback address, and without --users anyone who reaches it "
                          "may read and write every queue; nothing was created",
                          hint="give --users FILE (journal-engine users add FILE LOGIN), or --allow-anonymous "
                               "to serve without logins on purpose")


def tls_context(cert_path, key_path) -> ssl.SSLContext:
    """A server SSLContext with the certificate chain ``cert_path`` and its key ``key_path``;
    ConfigError naming the file that is missing, unreadable or not what it should be."""
    if (cert_path is None) != (key_path is None):
        missing = "--tls-key" if key_path is None else "--tls-cert"
        raise ConfigError(missing, None, "TLS needs both --tls-cert and --tls-key")
    for option, path in (("--tls-cert", cert_path), ("--tls-key", key_path)):
        try:
            with open(path, "rb"):
                pass
        except OSError as error:
            raise ConfigError(option, os.fspath(path), f"cannot read it: {error.strerror or error}; nothing was "
                              "created") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as error:
        raise ConfigError("--tls-cert", os.fspath(cert_path), f"with --tls-key {os.fspath(key_path)!r}: not a PEM "
                          f"certificate and its private key ({error.reason or error}); nothing was created") from None
    return context
