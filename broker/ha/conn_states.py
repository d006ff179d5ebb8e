"""The state of one end of an HA connection, shared by
:class:`~broker.ha.master_conn.MasterConnection` and :class:`~broker.ha.slave_conn.SlaveConnection`:
it moves only along the end's table of transitions, and a close keeps its first reason.

Pure: no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from protocol.ha import HAConnectionState, ProtocolError

__all__ = ["ConnectionStates"]


class ConnectionStates:
    """``state`` and ``close_reason`` of one connection end; a subclass names its
    ``transitions``: (state, event) -> next state."""

    __slots__ = ("_state", "close_reason")

    transitions: ClassVar[Mapping[tuple[HAConnectionState, str], HAConnectionState]]

    def __init__(self, initial: HAConnectionState) -> None:
        self._state = initial
        self.close_reason: str | None = None

    @property
    def state(self) -> HAConnectionState:
        return self._state

    def _move(self, event: str) -> None:
        nxt = self.transitions.get((self._state, event))
        if nxt is None:
            raise ProtocolError(f"{event} is not allowed in state {self._state.name}")
        self._state = nxt

    def close(self, reason: str = "closed") -> None:
        """The connection is gone (the first reason given is kept); later input is ignored."""
        if self.close_reason is None:
            self.close_reason = reason
        self._state = HAConnectionState.SHUTDOWN
