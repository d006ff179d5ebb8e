"""Writes coalesced per loop iteration: what both ends of a connection queue in one turn of the
event loop goes to the transport in one write at the end of that turn."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class WriteBatch:
    """Encoded frames queued in this loop iteration; :meth:`flush` (scheduled by the first
    :meth:`add` of the iteration) hands them to ``send`` in one piece."""

    __slots__ = ("_parts", "_send")

    def __init__(self, send: Callable[[bytes], None]) -> None:
        self._parts: list[bytes] = []
        self._send = send  # writes to the transport while the connection is open

    def add(self, data: bytes, loop: asyncio.AbstractEventLoop) -> None:
        if not self._parts:
            loop.call_soon(self.flush)
        self._parts.append(data)

    def flush(self) -> None:
        parts = self._parts
        if not parts:
            return
        self._parts = []
        self._send(parts[0] if len(parts) == 1 else b"".join(parts))
