"""What the HA connection state machines ask their drivers to do: plain data, carried out in order.

Master side (:class:`~broker.ha.master_conn.MasterConnection`): :class:`SendBytes`,
:class:`SlaveRegistered`, :class:`StreamingStarted`, :class:`SlaveAcked`,
:class:`CloseConnection`.

Slave side (:class:`~broker.ha.slave_conn.SlaveConnection`): :class:`TruncateLog`,
:class:`StartLogAt`, :class:`AppendEpoch`, :class:`AppendBytes`, :class:`UpdateConfirmOffset`,
:class:`SendBytes`, :class:`ReplicationRefused`, :class:`Reconnect`.

Order matters: an action that changes the log must be done (durably, where its docstring says so)
before a later :class:`SendBytes` tells the peer about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.ha import SlaveHandshake

__all__ = [
    "AppendBytes",
    "AppendEpoch",
    "CloseConnection",
    "MasterAction",
    "Reconnect",
    "ReplicationRefused",
    "SendBytes",
    "SlaveAcked",
    "SlaveAction",
    "SlaveRegistered",
    "StartLogAt",
    "StreamingStarted",
    "TruncateLog",
    "UpdateConfirmOffset",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendBytes:
    """Write ``data`` to the peer."""

    data: bytes


# --------------------------------------------------------------------------- master side


@dataclass(frozen=True, slots=True, kw_only=True)
class SlaveRegistered:
    """A slave introduced itself (an isAsyncLearner slave never joins the SyncStateSet)."""

    handshake: SlaveHandshake


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamingStarted:
    """The slave's first ack fixed where streaming starts; the writer may begin."""

    broker_id: int
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SlaveAcked:
    """Slave ``broker_id`` holds every CommitLog byte below ``offset``."""

    broker_id: int
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseConnection:
    """Close the socket and log ``reason``. ``refusal``: which rule the slave broke (one of
    :data:`broker.ha.refusals.REASONS`, counted), or None when it is not the slave's fault."""

    reason: str
    refusal: str | None = None


MasterAction = SendBytes | SlaveRegistered | StreamingStarted | SlaveAcked | CloseConnection


# --------------------------------------------------------------------------- slave side


@dataclass(frozen=True, slots=True, kw_only=True)
class TruncateLog:
    """Cut the CommitLog and ConsumeQueues to ``offset`` and drop the epoch entries starting at
    or after it (``EpochFile.truncate_suffix_from_offset``), all durably, before anything later.

    May be a no-op (``offset`` is already the max offset and no entry starts there).
    """

    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartLogAt:
    """The local log is empty and the master starts it at ``offset`` (its min offset or the start
    of its last file): the first appended byte has this offset."""

    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEpoch:
    """Append ``(epoch, start_offset)`` to the epoch file, durably, before the bytes that follow."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendBytes:
    """Append raw CommitLog bytes at ``offset`` (the local max offset), then dispatch them."""

    offset: int
    data: bytes | memoryview = field(repr=False)
    """Usually a read-only view of the received chunk (no copy); valid until dropped."""

    @property
    def end_offset(self) -> int:
        return self.offset + len(self.data)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateConfirmOffset:
    """Consumers on this slave may now read up to ``offset`` (master's confirm offset, capped at
    the local max offset)."""

    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationRefused:
    """No consistent point with this master and a non-empty local log: stop replicating and tell
    the operator; retrying the same master will not help."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconnect:
    """The master broke the protocol (or the stream is out of step): close the socket and
    handshake again with a new connection."""

    reason: str


SlaveAction = (
    TruncateLog
    | StartLogAt
    | AppendEpoch
    | AppendBytes
    | UpdateConfirmOffset
    | SendBytes
    | ReplicationRefused
    | Reconnect
)
