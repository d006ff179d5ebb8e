"""The slave's side of one HA connection, as a pure state machine (bytes in, actions out).

States (:class:`~protocol.ha.HAConnectionState`) and what moves them, see ``TRANSITIONS``::

    READY --start()--> HANDSHAKE --master's reply--> TRANSFER --transfers--> TRANSFER
                                  \\--no consistent point, or one below
                                     the confirm offset--> SUSPEND
                                  \\--master not at the named epoch--> SHUTDOWN (Reconnect)
    any --close() / protocol error--> SHUTDOWN

One object serves one TCP connection; after :class:`~broker.ha.actions.Reconnect` the driver
makes a new one (after a back-off) from the log as it then is. The driver's whole job::

    sock.write(conn.start(epoch_entries=epoch_file.entries(), max_offset=store.max_offset))
    for action in conn.receive_data(chunk):     # on every chunk from the master
        TruncateLog       store.truncate + epoch_file.truncate_suffix_from_offset, durably
        StartLogAt        the empty store's first byte will be at this offset
        AppendEpoch       epoch_file.append (durable) -- always before the bytes of that epoch
        AppendBytes       store.append_raw, then dispatch ConsumeQueues
        UpdateConfirmOffset   consumers on this slave may read up to it
        SendBytes         write it (the acks; only after the actions before it are done)
        ReplicationRefused    log it loudly, close, wait for an operator
        Reconnect         log it, close, reconnect with back-off

On the master's handshake reply the slave decides (:func:`~broker.ha.truncation.
decide_truncation`): a master not at the epoch the controllers named is left (``Reconnect``,
nothing cut); a consistent point below the slave's confirm offset is refused like a history
with nothing in common (``ReplicationRefused``); otherwise it emits ``TruncateLog`` then the ack
of that point. A transfer of an epoch newer than the named one also means ``Reconnect``. An
empty slave acks 0 and accepts whatever offset the master starts at (its min offset, or the
start of its last file with isSyncFromLastFile). Afterwards every transfer must
start exactly at the local max offset; a transfer of a new epoch must start that epoch at the
local max offset (the bytes before it are the older epochs'), and an epoch older than the local
one is out of step: both mean ``Reconnect``, and the next handshake truncates properly. One ack
(the new max offset) follows each chunk that carried transfers, heartbeats included, so the
master hears from a caught-up slave at every heartbeat.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from broker.ha.actions import (
    AppendBytes,
    AppendEpoch,
    Reconnect,
    ReplicationRefused,
    SendBytes,
    SlaveAction,
    StartLogAt,
    TruncateLog,
    UpdateConfirmOffset,
)
from broker.ha.conn_states import ConnectionStates
from broker.ha.truncation import (
    BelowConfirmOffset,
    ConsistentPoint,
    EpochNotNamed,
    NoCommonEntry,
    TruncationDecision,
    decide_truncation,
)
from protocol.ha import (
    DEFAULT_MAX_BODY_BYTES,
    Buffer,
    EpochEntry,
    HAConnectionState,
    MasterHandshake,
    MasterStreamDecoder,
    MasterTransfer,
    ProtocolError,
    SlaveAck,
    SlaveHandshake,
    check_epoch_entries,
    encode_slave_ack,
    encode_slave_handshake,
)

__all__ = ["TRANSITIONS", "SlaveConnection"]

S = HAConnectionState

TRANSITIONS: Final[Mapping[tuple[HAConnectionState, str], HAConnectionState]] = {
    (S.READY, "start"): S.HANDSHAKE,
    (S.HANDSHAKE, "master_handshake"): S.TRANSFER,
    (S.HANDSHAKE, "refuse"): S.SUSPEND,
    (S.TRANSFER, "master_transfer"): S.TRANSFER,
    (S.READY, "close"): S.SHUTDOWN,
    (S.HANDSHAKE, "close"): S.SHUTDOWN,
    (S.TRANSFER, "close"): S.SHUTDOWN,
    (S.SUSPEND, "close"): S.SHUTDOWN,
    (S.SHUTDOWN, "close"): S.SHUTDOWN,
}
"""(state, event) -> next state; a message in any other state is a protocol error."""


class SlaveConnection(ConnectionStates):
    """One connection to the master, seen from the slave."""

    __slots__ = (
        "_allow_below_confirm",
        "_confirm",
        "_decoder",
        "_entries",
        "_floor",
        "_fresh",
        "_handshake",
        "_master",
        "_max",
        "decision",
        "named_epoch",
    )

    transitions = TRANSITIONS

    def __init__(
        self,
        *,
        broker_id: int,
        address: str,
        sync_from_last_file: bool = False,
        async_learner: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        named_epoch: int | None = None,
        allow_below_confirm: bool = False,
    ) -> None:
        """``named_epoch``: the epoch the controllers named the master for (None: unchecked);
        the driver raises it when the controllers name the same master again at a newer epoch.
        ``allow_below_confirm``: the operator lets the handshake cut below the confirm offset."""
        super().__init__(S.READY)
        self.named_epoch = named_epoch
        self._allow_below_confirm = allow_below_confirm
        self._floor = 0
        self._handshake = SlaveHandshake(
            broker_id=broker_id,
            address=address,
            sync_from_last_file=sync_from_last_file,
            async_learner=async_learner,
        )
        self._decoder = MasterStreamDecoder(max_body_bytes)
        self._entries: list[EpochEntry] = []
        self._max = 0
        self._fresh = False  # the log is empty: the first transfer may start anywhere
        self._confirm: int | None = None
        self._master: MasterHandshake | None = None
        self.decision: TruncationDecision | None = None

    # ---------------------------------------------------------------- state

    @property
    def max_offset(self) -> int:
        """The local max offset once every action emitted so far is carried out."""
        return self._max

    @property
    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        """The local epoch history once every action emitted so far is carried out."""
        return tuple(self._entries)

    @property
    def confirm_offset(self) -> int | None:
        return self._confirm

    @property
    def master_handshake(self) -> MasterHandshake | None:
        """The master's reply (its epoch, max offset and history at handshake time)."""
        return self._master

    # ---------------------------------------------------------------- input

    def start(
        self, *, epoch_entries: Sequence[EpochEntry], max_offset: int, confirm_offset: int = 0
    ) -> bytes:
        """Begin with the local log as it is now (``confirm_offset``: its persisted confirm
        offset, the floor of any truncation); returns the handshake to send."""
        if self._state is not S.READY:
            raise RuntimeError(f"start() in state {self._state.name}")
        entries = list(epoch_entries)
        check_epoch_entries(entries)
        if max_offset < 0 or confirm_offset < 0:
            raise ValueError("max_offset and confirm_offset must be >= 0")
        self._move("start")
        self._floor = confirm_offset
        self._entries = entries
        self._max = max_offset
        return encode_slave_handshake(self._handshake)

    def receive_data(self, data: Buffer) -> list[SlaveAction]:
        """Bytes from the master in, actions out (carry them out in order)."""
        if self._state in (S.SHUTDOWN, S.SUSPEND):
            return []
        if self._state is S.READY:
            raise RuntimeError("receive_data() before start()")
        actions: list[SlaveAction] = []
        transfers = 0
        msgs, error = self._decoder.feed_until_error(data)
        try:
            for msg in msgs:
                if isinstance(msg, MasterHandshake):
                    if not self._on_handshake(msg, actions):
                        return actions  # refused (SUSPEND) or reconnecting: the rest is ignored
                else:
                    self._on_transfer(msg, actions)
                    transfers += 1
            if error is not None:
                raise error
        except ProtocolError as exc:
            reason = f"master: {exc}"
            self.close(reason)
            actions.append(Reconnect(reason=reason))
            return actions
        if transfers:
            actions.append(SendBytes(data=encode_slave_ack(SlaveAck(max_offset=self._max))))
        return actions

    def _on_handshake(self, msg: MasterHandshake, actions: list[SlaveAction]) -> bool:
        """Truncate to the consistent point and ack it; False when refusing to replicate (or
        reconnecting: the master is not at the epoch the controllers named)."""
        self._master = msg
        decision = decide_truncation(
            local_entries=self._entries,
            local_max_offset=self._max,
            local_confirm_offset=self._floor,
            master_entries=msg.epoch_entries,
            master_max_offset=msg.master_max_offset,
            master_epoch=msg.master_epoch,
            named_epoch=self.named_epoch,
            allow_below_confirm=self._allow_below_confirm,
        )
        self.decision = decision
        if isinstance(decision, EpochNotNamed):
            self.close(decision.reason)
            actions.append(Reconnect(reason=decision.reason))
            return False
        if isinstance(decision, NoCommonEntry | BelowConfirmOffset):
            self._move("refuse")
            self.close_reason = decision.reason
            actions.append(ReplicationRefused(reason=decision.reason))
            return False
        self._move("master_handshake")
        point = decision.offset if isinstance(decision, ConsistentPoint) else 0
        self._entries = [e for e in self._entries if e.start_offset < point]
        self._max = point
        self._fresh = point == 0
        actions.append(TruncateLog(offset=point))
        actions.append(SendBytes(data=encode_slave_ack(SlaveAck(max_offset=point))))
        return True

    def _on_transfer(self, msg: MasterTransfer, actions: list[SlaveAction]) -> None:
        self._move("master_transfer")
        fresh = self._fresh
        self._fresh = False
        if fresh and msg.offset != self._max:
            actions.append(StartLogAt(offset=msg.offset))
            self._max = msg.offset
        elif msg.offset != self._max:
            raise ProtocolError(
                f"transfer at offset {msg.offset} but the local max offset is {self._max}"
            )
        if self.named_epoch is not None and msg.epoch > self.named_epoch:
            raise ProtocolError(
                f"transfer of epoch {msg.epoch}, newer than epoch {self.named_epoch} the "
                "controllers named the master for"
            )
        last = self._entries[-1] if self._entries else None
        if last is None or msg.epoch > last.epoch:
            if not fresh and msg.epoch_start_offset != self._max:
                raise ProtocolError(
                    f"new epoch {msg.epoch} starts at {msg.epoch_start_offset}, not at the local "
                    f"max offset {self._max}"
                )
            if last is not None and msg.epoch_start_offset < last.start_offset:
                raise ProtocolError(
                    f"new epoch {msg.epoch} starts at {msg.epoch_start_offset}, before epoch "
                    f"{last.epoch} at {last.start_offset}"
                )
            entry = EpochEntry(epoch=msg.epoch, start_offset=msg.epoch_start_offset)
            self._entries.append(entry)
            actions.append(AppendEpoch(epoch=entry.epoch, start_offset=entry.start_offset))
        elif msg.epoch < last.epoch:
            raise ProtocolError(
                f"transfer of epoch {msg.epoch}, older than local epoch {last.epoch}"
            )
        elif msg.epoch_start_offset != last.start_offset:
            raise ProtocolError(
                f"epoch {msg.epoch} starts at {msg.epoch_start_offset} on the master but at "
                f"{last.start_offset} here"
            )
        if len(msg.body):
            body = msg.body
            data = body if isinstance(body, bytes | memoryview) else memoryview(body)
            actions.append(AppendBytes(offset=msg.offset, data=data))
            self._max += len(msg.body)
        confirm = min(msg.confirm_offset, self._max)
        if confirm != self._confirm:
            self._confirm = confirm
            actions.append(UpdateConfirmOffset(offset=confirm))
