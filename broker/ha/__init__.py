"""AutoSwitchHAService: replication of the CommitLog from a master to its slaves.

Pure parts (no asyncio, no clock, no sockets), for the asyncio drivers to call:

- :mod:`protocol.ha`: the wire messages, encoders and incremental decoders.
- :mod:`broker.ha.truncation`: the consistent point a slave truncates to at handshake.
- :mod:`broker.ha.batch`: epoch-bounded, optionally record-aligned transfer batches.
- :mod:`broker.ha.master_conn` / :mod:`broker.ha.slave_conn`: one connection's state machine on
  each side, emitting the data classes of :mod:`broker.ha.actions`.
- :mod:`storage.epoch_file`: the durable epoch history.
- :mod:`broker.ha.sync_state`: the master's SyncStateSet and confirm offset.
- :mod:`broker.ha.role_change`: the epoch history a broker persists before serving as master.

Asyncio drivers around them:

- :mod:`broker.ha.service`: :class:`HAService`, the facade the broker uses (its docstring is the
  API), with :class:`HAConfig` (:mod:`broker.ha.config`).
- :mod:`broker.ha.master_server` / :mod:`broker.ha.slave_client`: the two sides' sockets.
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
from broker.ha.config import HAConfig
from broker.ha.master_conn import MasterConnection, MasterLog, MasterLogState
from broker.ha.role_change import MasterEpochPlan, StaleMasterEpoch, plan_master_epochs
from broker.ha.service import HARole, HAService, ProposeSyncStateSet
from broker.ha.slave_client import SlaveState
from broker.ha.slave_conn import SlaveConnection
from broker.ha.sync_state import SyncState
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
    "HAConfig",
    "HARole",
    "HAService",
    "MasterAction",
    "MasterConnection",
    "MasterEpochPlan",
    "MasterLog",
    "MasterLogState",
    "NoCommonEntry",
    "ProposeSyncStateSet",
    "Reconnect",
    "ReplicationRefused",
    "SendBytes",
    "SlaveAcked",
    "SlaveAction",
    "SlaveConnection",
    "SlaveRegistered",
    "SlaveState",
    "StaleMasterEpoch",
    "StartLogAt",
    "StreamingStarted",
    "SyncState",
    "TruncateLog",
    "TruncationDecision",
    "UpdateConfirmOffset",
    "find_consistent_point",
    "next_batch",
    "plan_master_epochs",
    "record_aligned_length",
]
