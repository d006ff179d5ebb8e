"""Listening ports, taken or checked before a daemon writes anything.

A daemon binds (or at least checks) every port it will listen on before it creates its data
directory or a Raft group: a port in use is then one line at start, and nothing was written on
the way to finding out.
"""

from __future__ import annotations

import socket


class PortUnavailable(Exception):
    """A port this daemon must listen on cannot be bound (in use, or not an address of ours)."""


def _address(host: str, port: int, what: str) -> tuple[socket.AddressFamily, tuple[str, int]]:
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise PortUnavailable(f"{what} address {host}:{port} does not resolve: {exc}") from None
    family, _type, _proto, _name, sockaddr = infos[0]
    return family, (str(sockaddr[0]), int(sockaddr[1]))


def bind_listener(host: str, port: int, what: str, backlog: int = 1024) -> socket.socket:
    """A listening socket on ``host:port`` (``what`` names it in the error)."""
    family, sockaddr = _address(host, port, what)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As asyncio does: a port whose old connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise PortUnavailable(
            f"{what} port {host}:{port} is not available: {exc.strerror or exc}"
        ) from None
    sock.setblocking(False)
    return sock


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise :class:`PortUnavailable` if ``host:port`` cannot be bound now (0: nothing to do)."""
    if port == 0:
        return
    bind_listener(host, port, what, backlog=1).close()
