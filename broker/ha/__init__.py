"""AutoSwitchHAService: replication of the CommitLog from a master to its slaves.

Pure parts (no asyncio, no clock, no sockets), for the asyncio drivers to call:

- :mod:`protocol.ha`: the wire messages, encoders and incremental decoders.
- :mod:`broker.ha.truncation`: the consistent point a slave truncates to at handshake.
- :mod:`broker.ha.batch`: epoch-bounded, optionally record-aligned transfer batches.
- :mod:`broker.ha.master_conn` / :mod:`broker.ha.slave_conn`: one connection's state machine on
  each side, emitting the data classes of :mod:`broker.ha.actions`.
- :mod:`storage.epoch_file`: the durable epoch history.
"""

from broker.ha.actions import (
    AppendBytes,
    AppendEpoch,
    CloseConnection,
    MasterAction,
    Reconnect,
    ReplicationRefused,
    SendBytes,
    SlaveAcked,
    SlaveAction,
    SlaveRegistered,
    StartLogAt,
    StreamingStarted,
    TruncateLog,
    UpdateConfirmOffset,
)
from broker.ha.batch import Batch, next_batch, record_aligned_length
from broker.ha.master_conn import MasterConnection, MasterLog, MasterLogState
from broker.ha.slave_conn import SlaveConnection
from broker.ha.truncation import (
    ConsistentPoint,
    EmptyLog,
    NoCommonEntry,
    TruncationDecision,
    find_consistent_point,
)

__all__ = [
    "AppendBytes",
    "AppendEpoch",
    "Batch",
    "CloseConnection",
    "ConsistentPoint",
    "EmptyLog",
    "MasterAction",
    "MasterConnection",
    "MasterLog",
    "MasterLogState",
    "NoCommonEntry",
    "Reconnect",
    "ReplicationRefused",
    "SendBytes",
    "SlaveAcked",
    "SlaveAction",
    "SlaveConnection",
    "SlaveRegistered",
    "StartLogAt",
    "StreamingStarted",
    "TruncateLog",
    "TruncationDecision",
    "UpdateConfirmOffset",
    "find_consistent_point",
    "next_batch",
    "record_aligned_length",
]
