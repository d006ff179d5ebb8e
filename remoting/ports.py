"""Listening ports, taken or checked before a daemon writes anything.

A daemon binds (or at least checks) every port it will listen on before it creates its data
directory or a Raft group: a port in use is then one line at start, and nothing was written on
the way to finding out.
"""

from __future__ import annotations

import socket


class PortUnavailable(Exception):
    """A port this daemon must listen on cannot be bound (in use, or not an address of ours)."""


def _addresses(
    host: str, port: int, what: str
) -> list[tuple[socket.AddressFamily, tuple[str, int]]]:
    """Every distinct address ``host`` stands for (``localhost`` may be ::1 and 127.0.0.1)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise PortUnavailable(f"{what} address {host}:{port} does not resolve: {exc}") from None
    out: list[tuple[socket.AddressFamily, tuple[str, int]]] = []
    for family, _type, _proto, _name, sockaddr in infos:
        address = (family, (str(sockaddr[0]), int(sockaddr[1])))
        if address not in out:
            out.append(address)
    return out


def bind_listeners(host: str, port: int, what: str, backlog: int = 1024) -> list[socket.socket]:
    """Listening sockets on every address of ``host`` at ``port``, as asyncio's
    ``create_server`` would make them (``what`` names the port in the error)."""
    socks: list[socket.socket] = []
    try:
        for family, (addr, _port) in _addresses(host, port, what):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            # As asyncio does: a port whose old connections linger in TIME_WAIT is free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            # With port 0 every address gets the port the first one was given.
            bound = int(socks[0].getsockname()[1]) if len(socks) > 1 else port
            sock.bind((addr, bound))
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise PortUnavailable(
            f"{what} port {host}:{port} is not available: {exc.strerror or exc}"
        ) from None
    return socks


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise :class:`PortUnavailable` if ``host:port`` cannot be bound now (0: nothing to do)."""
    if port == 0:
        return
    for sock in bind_listeners(host, port, what, backlog=1):
        sock.close()
