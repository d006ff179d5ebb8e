"""Which connection a request came on: a number per connection, kept in its attributes.

Broker bindings, liveness and route registrations remember the connection by this number, so
its closing can end them at once.
"""

from __future__ import annotations

import itertools

from remoting.server import Connection

_CID = "controller.connection_id"


class ConnectionIds:
    def __init__(self) -> None:
        self._next = itertools.count(1)

    def of(self, conn: Connection) -> int:
        """The connection's number, given on first use."""
        cid = conn.attrs.get(_CID)
        if not isinstance(cid, int):
            cid = next(self._next)
            conn.attrs[_CID] = cid
        return cid

    @staticmethod
    def known(conn: Connection) -> int | None:
        """The connection's number if it has one."""
        cid = conn.attrs.get(_CID)
        return cid if isinstance(cid, int) else None
