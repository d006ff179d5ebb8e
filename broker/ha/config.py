"""Settings of the HA drivers (master server, slave client, SyncStateSet upkeep)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from broker.ha.batch import DEFAULT_MAX_BATCH_BYTES
from broker.ha.sync_state import DEFAULT_MAX_TIME_NOT_CATCHUP_MS
from protocol.ha import DEFAULT_MAX_BODY_BYTES
from remoting.client import TlsSource

__all__ = ["HAConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HAConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    """The HA port (0: any free port, see ``HAService.address``)."""

    # master side
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    """Largest transfer body (batches are also cut at epoch and segment ends)."""
    write_buffer_high_bytes: int = 8 << 20
    """A slave's connection stops being fed above this many unsent bytes (backpressure)..."""
    write_buffer_low_bytes: int = 2 << 20
    """... and is fed again below this many."""
    pump_budget_bytes: int = 16 << 20
    """Bytes one slave is sent per event-loop callback before yielding to the others."""
    heartbeat_interval_ms: int = 500
    """An idle slave gets an empty transfer (a heartbeat) this often."""
    confirm_push_delay_ms: int = 5
    """A caught-up slave hears of a new confirm offset at most this late (0: at once)."""
    tick_interval_ms: int = 100
    """How often heartbeats, silence and the SyncStateSet deadlines are checked."""
    max_time_slave_not_catchup_ms: int = DEFAULT_MAX_TIME_NOT_CATCHUP_MS
    """``ha_max_time_slave_not_catchup_ms``: a member not caught up this long is shrunk."""
    propose_timeout_ms: int = 5_000
    """An AlterSyncStateSet not answered within this long counts as failed."""
    propose_retry_ms: int = 1_000
    """After a failed AlterSyncStateSet, wait this long before proposing again."""
    connection_idle_timeout_ms: int = 20_000
    """Close a connection that has heard nothing for this long (each side)."""
    auth_key: bytes | None = None
    """With authentication on: :func:`protocol.ha_auth.ha_key` of the cluster's auth key; master
    and slave prove they hold it before the handshake (:mod:`protocol.ha_auth`)."""
    server_tls: ssl.SSLContext | None = None
    """With TLS on: the HA port's context (:attr:`remoting.tls.DaemonTls.internal_listener`:
    with ``tls_verify_client`` a slave without a certificate of the cluster's CA is refused)."""
    client_tls: TlsSource | None = None
    """With TLS on: the context a slave connects to its master with (the daemon's newest)."""

    # slave side
    reconnect_min_ms: int = 100
    reconnect_max_ms: int = 3_000
    connect_timeout_ms: int = 3_000
    read_buffer_bytes: int = 16 << 20
    """Stop reading from the master when this many received bytes wait to be stored."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    async_learner: bool = False
    """Never join the SyncStateSet (isAsyncLearner)."""
    sync_from_last_file: bool = False
    """An empty slave starts at the master's last CommitLog file (isSyncFromLastFile)."""
    allow_truncate_below_confirm: bool = False
    """``ha_allow_truncate_below_confirm``: the operator lets a handshake cut this slave's log
    below its confirm offset (acknowledged messages), e.g. after an unclean election."""
    suspended_retry_ms: int = 10_000
    """A slave that refused to replicate (SUSPENDED) tries the handshake again this often."""

    def validate(self) -> None:
        positive = {
            "max_batch_bytes": self.max_batch_bytes,
            "write_buffer_high_bytes": self.write_buffer_high_bytes,
            "pump_budget_bytes": self.pump_budget_bytes,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "tick_interval_ms": self.tick_interval_ms,
            "max_time_slave_not_catchup_ms": self.max_time_slave_not_catchup_ms,
            "connection_idle_timeout_ms": self.connection_idle_timeout_ms,
            "propose_timeout_ms": self.propose_timeout_ms,
            "reconnect_min_ms": self.reconnect_min_ms,
            "connect_timeout_ms": self.connect_timeout_ms,
            "suspended_retry_ms": self.suspended_retry_ms,
            "read_buffer_bytes": self.read_buffer_bytes,
            "max_body_bytes": self.max_body_bytes,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be positive, not {value}")
        if not 0 <= self.write_buffer_low_bytes <= self.write_buffer_high_bytes:
            raise ValueError("write_buffer_low_bytes must be in [0, write_buffer_high_bytes]")
        if self.reconnect_max_ms < self.reconnect_min_ms:
            raise ValueError("reconnect_max_ms must be >= reconnect_min_ms")
        if self.confirm_push_delay_ms < 0:
            raise ValueError("confirm_push_delay_ms must be >= 0")
        if self.propose_retry_ms < 0:
            raise ValueError("propose_retry_ms must be >= 0")
        if not 0 <= self.listen_port <= 65535:
            raise ValueError(f"listen_port {self.listen_port} is not a port")
        if self.max_body_bytes < self.max_batch_bytes:
            raise ValueError("max_body_bytes must be >= max_batch_bytes")
