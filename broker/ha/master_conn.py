"""The master's side of one HA connection, as a pure state machine (bytes in, actions out).

States (:class:`~protocol.ha.HAConnectionState`) and what moves them, see ``TRANSITIONS``::

    HANDSHAKE --slave handshake, reply sent--> TRANSFER --close / bad input--> SHUTDOWN

The driver owns the socket, the timers and the store. Its whole job::

    actions = conn.receive_data(data, log)      # on every chunk from the slave
        SendBytes            write it (the handshake reply)
        SlaveRegistered      the slave's identity and flags (isAsyncLearner: never in the set)
        StreamingStarted     the slave's first ack fixed where streaming starts: wake the writer
        SlaveAcked           feed the SyncStateSet / confirm-offset logic
        CloseConnection      log the reason, close the socket
    out = conn.next_transfer(log, store.read_raw, record_aligned=False)
        # in the writer loop while it returns (header, body): write(header); write(body);
        # await drain. body is the store's memoryview, not a copy. MessageStore.read_raw already
        # returns whole records within one segment; record_aligned=True (the default) cuts
        # bodies itself for a reader that returns raw byte ranges.
    hb = conn.heartbeat(log)                    # when idle for the heartbeat interval

(Or, step by step: ``plan_transfer(log)`` gives a :class:`~broker.ha.batch.Batch`, the driver
reads at most ``batch.length`` bytes, ``commit_transfer(batch, body)`` gives the header.)

``log`` is anything with the attributes of :class:`MasterLog` (a live adapter over the store, or
a :class:`MasterLogState` snapshot). Where streaming starts: at the slave's first ack, except
that an ack of 0 means "my log is empty": then at the master's ``min_offset``, or at
``last_file_start`` when the slave's handshake set isSyncFromLastFile (never before the first
epoch entry's start: bytes no epoch describes cannot be labelled, so they are not replicated).
SUSPEND is not used on this side.

Acks are checked: the first one must lie within the master's log, later ones never go back and
never pass what was sent. A violation closes the connection (the slave handshakes again); the
:class:`CloseConnection` names the rule broken (:mod:`broker.ha.refusals`): ``no_handshake`` for
a stream that does not begin with a valid handshake (an ack first), ``ack_out_of_range``,
``malformed``. The ack that breaks a rule is never reported as :class:`SlaveAcked`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from broker.ha.actions import (
    CloseConnection,
    MasterAction,
    SendBytes,
    SlaveAcked,
    SlaveRegistered,
    StreamingStarted,
)
from broker.ha.batch import (
    DEFAULT_MAX_BATCH_BYTES,
    Batch,
    RecordBoundary,
    epoch_at,
    next_batch,
    record_aligned_length,
)
from broker.ha.conn_states import ConnectionStates
from broker.ha.refusals import ACK_OUT_OF_RANGE, MALFORMED, NO_HANDSHAKE
from protocol.ha import (
    Buffer,
    EpochEntry,
    HAConnectionState,
    MasterHandshake,
    MasterTransfer,
    ProtocolError,
    SlaveAck,
    SlaveHandshake,
    SlaveStreamDecoder,
    encode_master_handshake,
    encode_transfer_header,
)
from protocol.message import peek_prefix

__all__ = [
    "TRANSITIONS",
    "MasterConnection",
    "MasterLog",
    "MasterLogState",
    "ReadRaw",
]

S = HAConnectionState

TRANSITIONS: Final[Mapping[tuple[HAConnectionState, str], HAConnectionState]] = {
    (S.HANDSHAKE, "slave_handshake"): S.TRANSFER,
    (S.TRANSFER, "slave_ack"): S.TRANSFER,
    (S.HANDSHAKE, "close"): S.SHUTDOWN,
    (S.TRANSFER, "close"): S.SHUTDOWN,
    (S.SHUTDOWN, "close"): S.SHUTDOWN,
}
"""(state, event) -> next state; any other pair closes the connection."""

ReadRaw = Callable[[int, int], Buffer]
"""``(offset, max_bytes) -> bytes``: the store's ``read_raw``; may return fewer bytes (it stops at
a CommitLog segment's end), never more."""


class _Refused(ProtocolError):
    """A rule the slave broke (``refusal``), or None: the master cannot serve it."""

    def __init__(self, refusal: str | None, detail: str) -> None:
        super().__init__(detail)
        self.refusal = refusal


class MasterLog(Protocol):
    """What the master connection reads of the master's log (all offsets are CommitLog offsets)."""

    @property
    def epoch_entries(self) -> tuple[EpochEntry, ...]: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def confirm_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def last_file_start(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class MasterLogState:
    """A snapshot satisfying :class:`MasterLog`."""

    epoch_entries: tuple[EpochEntry, ...]
    max_offset: int
    confirm_offset: int = 0
    min_offset: int = 0
    last_file_start: int = 0


class MasterConnection(ConnectionStates):
    """One slave's connection, seen from the master."""

    __slots__ = (
        "_acked",
        "_decoder",
        "_handshake",
        "_max_batch",
        "_next",
        "_start",
    )

    transitions = TRANSITIONS

    def __init__(self, *, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> None:
        if max_batch_bytes <= 0:
            raise ValueError("max_batch_bytes must be positive")
        super().__init__(S.HANDSHAKE)
        self._max_batch = max_batch_bytes
        self._decoder = SlaveStreamDecoder()
        self._handshake: SlaveHandshake | None = None
        self._start: int | None = None  # where streaming started
        self._next: int | None = None  # the next offset to send
        self._acked: int | None = None  # the slave's last ack

    # ---------------------------------------------------------------- state

    @property
    def handshake(self) -> SlaveHandshake | None:
        return self._handshake

    @property
    def broker_id(self) -> int | None:
        return None if self._handshake is None else self._handshake.broker_id

    @property
    def acked_offset(self) -> int | None:
        """The slave's last acknowledged max offset (None before its first ack)."""
        return self._acked

    @property
    def next_offset(self) -> int | None:
        """The next offset to send (None until the slave's first ack)."""
        return self._next

    # ---------------------------------------------------------------- input

    def receive_data(self, data: Buffer, log: MasterLog) -> list[MasterAction]:
        """Bytes from the slave in, actions out (in the order they must be carried out)."""
        if self._state is S.SHUTDOWN:
            return []
        actions: list[MasterAction] = []
        msgs, error = self._decoder.feed_until_error(data)
        try:
            for msg in msgs:
                if isinstance(msg, SlaveHandshake):
                    self._on_handshake(msg, log, actions)
                else:
                    self._on_ack(msg, log, actions)
            if error is not None:
                raise error
        except ProtocolError as exc:
            if isinstance(exc, _Refused):
                refusal = exc.refusal
            else:  # the decoder's: the stream is not what a slave sends
                refusal = NO_HANDSHAKE if self._handshake is None else MALFORMED
            reason = f"slave {self._who()}: {exc}"
            self.close(reason)
            actions.append(CloseConnection(reason=reason, refusal=refusal))
        return actions

    def _who(self) -> str:
        h = self._handshake
        return "(before handshake)" if h is None else f"{h.broker_id}@{h.address}"

    def _on_handshake(
        self, msg: SlaveHandshake, log: MasterLog, actions: list[MasterAction]
    ) -> None:
        self._move("slave_handshake")
        self._handshake = msg
        entries = log.epoch_entries
        if not entries:
            raise _Refused(None, "this master has no epoch entry and cannot serve slaves")
        try:
            reply = MasterHandshake(
                master_max_offset=log.max_offset,
                master_epoch=entries[-1].epoch,
                epoch_entries=tuple(entries),
            )
        except ValueError as exc:
            raise _Refused(None, f"cannot describe the master's log: {exc}") from None
        actions.append(SlaveRegistered(handshake=msg))
        actions.append(SendBytes(data=encode_master_handshake(reply)))

    def _on_ack(self, msg: SlaveAck, log: MasterLog, actions: list[MasterAction]) -> None:
        self._move("slave_ack")
        assert self._handshake is not None  # the decoder yields the handshake first
        offset = msg.max_offset
        broker_id = self._handshake.broker_id
        if self._next is None:
            if offset == 0:
                start = (
                    log.last_file_start if self._handshake.sync_from_last_file else log.min_offset
                )
                # Bytes before the first epoch cannot be labelled, so they are not replicated.
                entries = log.epoch_entries
                if entries:
                    start = max(start, entries[0].start_offset)
            else:
                start = offset
            if start < log.min_offset:
                raise _Refused(
                    None,
                    f"needs offset {start}, below the master's min offset {log.min_offset}; "
                    "the slave must be cleaned",
                )
            if start > log.max_offset:
                raise _Refused(
                    ACK_OUT_OF_RANGE,
                    f"acked offset {start}, beyond the master's max offset {log.max_offset}",
                )
            self._start = self._next = start
            self._acked = offset
            actions.append(StreamingStarted(broker_id=broker_id, offset=start))
            actions.append(SlaveAcked(broker_id=broker_id, offset=offset))
            return
        assert self._start is not None and self._acked is not None
        if offset < self._acked or offset < self._start:
            raise _Refused(ACK_OUT_OF_RANGE, f"ack {offset} goes back (last ack {self._acked})")
        if offset > self._next:
            raise _Refused(ACK_OUT_OF_RANGE, f"ack {offset} passes what was sent ({self._next})")
        self._acked = offset
        actions.append(SlaveAcked(broker_id=broker_id, offset=offset))

    # ---------------------------------------------------------------- output

    def plan_transfer(self, log: MasterLog, *, align: RecordBoundary | None = None) -> Batch | None:
        """The next batch to send, or None (not streaming yet, closed, or caught up)."""
        if self._state is not S.TRANSFER or self._next is None:
            return None
        return next_batch(
            self._next,
            log.max_offset,
            log.epoch_entries,
            self._max_batch,
            log.confirm_offset,
            align=align,
        )

    def commit_transfer(self, batch: Batch, body: Buffer) -> bytes:
        """The header for ``body`` (the first ``len(body)`` bytes of ``batch``); advances.

        ``body`` may be shorter than planned (a segment end, a record boundary) but not empty
        and not past ``batch.max_length``.
        """
        if self._next != batch.offset:
            raise ValueError(f"batch at {batch.offset} is not the next offset {self._next}")
        if not 0 < len(body) <= batch.max_length:
            raise ValueError(f"body of {len(body)} bytes for a batch of at most {batch.max_length}")
        header = encode_transfer_header(
            MasterTransfer(
                offset=batch.offset,
                epoch=batch.epoch,
                epoch_start_offset=batch.epoch_start_offset,
                confirm_offset=batch.confirm_offset,
                body=body,
            )
        )
        self._next = batch.offset + len(body)
        return header

    def next_transfer(
        self, log: MasterLog, read: ReadRaw, *, record_aligned: bool = True
    ) -> tuple[bytes, Buffer] | None:
        """Plan, read and commit the next batch: ``(header, body)`` to write, or None.

        ``read`` is the store's zero-copy ``read_raw``; with ``record_aligned`` the body is cut
        at the last whole record (or extended to the first record's end if that is longer
        than the batch). None also when ``read`` returns nothing.
        """
        batch = self.plan_transfer(log)
        if batch is None:
            return None
        body = read(batch.offset, batch.length)
        if record_aligned and len(body):
            n = record_aligned_length(body)
            if n == 0:
                size = peek_prefix(body, 0)[0] if len(body) >= 8 else batch.max_length
                body = read(batch.offset, min(size, batch.max_length))
                n = record_aligned_length(body)
                if n == 0:
                    raise ValueError(f"no whole record at offset {batch.offset}")
            body = body[:n]
        if not len(body):
            return None
        return self.commit_transfer(batch, body), body

    def heartbeat(self, log: MasterLog) -> bytes | None:
        """A transfer with no body at the next offset, or None before streaming starts."""
        if self._state is not S.TRANSFER or self._next is None:
            return None
        entry = epoch_at(log.epoch_entries, self._next)
        return encode_transfer_header(
            MasterTransfer(
                offset=self._next,
                epoch=entry.epoch,
                epoch_start_offset=entry.start_offset,
                confirm_offset=log.confirm_offset,
            )
        )
