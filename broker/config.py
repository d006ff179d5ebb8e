"""Broker configuration: every key, its type, default and meaning.

The TOML file uses these names; flags override them. ``docs/config-reference.md`` is generated
from this class (``python -m broker --print-config-reference``), so it cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daemon.config import (
    address,
    address_list,
    at_least,
    between,
    choice,
    field,
    log_format_field,
    log_level_field,
    port,
)
from remoting.tls import TlsError, TlsFiles, files_from_config


def grpc_address(value: object) -> str | None:
    if str(value) == "0":
        return None
    return None if address(value) is None else "must be host:port, or 0 to turn it off"


def _page_multiple(value: int) -> str | None:
    return None if value >= 4096 and value % 4096 == 0 else "must be a multiple of 4096"


@dataclass(frozen=True, kw_only=True)
class BrokerConfig:
    cluster: str = field("DefaultCluster", "cluster this broker group belongs to")
    broker_name: str = field(
        "broker-a", "broker group name; brokers with the same name replicate each other"
    )
    listen: str = field("127.0.0.1:10911", "host:port serving clients", address)
    ha_port: int | None = field(None, "port serving slaves (default: listen port + 1)", port)
    grpc_listen: str | None = field(
        None,
        "host:port serving the gRPC protocol of the official RocketMQ 5 clients in plaintext "
        "(default: the listen host, listen port + 2); 0 turns it off; off with tls_enabled "
        "unless grpc_plaintext_with_tls",
        grpc_address,
    )
    grpc_tls_listen: str | None = field(
        None,
        "host:port serving the gRPC protocol over TLS with tls_cert and tls_key, reloaded on "
        "SIGHUP (default: no TLS port)",
        address,
    )
    tls_cert: Path | None = field(
        None,
        "PEM certificate chain of this broker's TLS ports: the gRPC TLS port, and with "
        "tls_enabled the client and HA ports (also presented as its client certificate); "
        "required with grpc_tls_listen or tls_enabled",
    )
    tls_key: Path | None = field(
        None,
        "PEM private key of tls_cert (not readable by anyone: a broker refuses to start with a "
        "world-readable key); required with grpc_tls_listen or tls_enabled",
    )
    tls_enabled: bool = field(
        False,
        "serve TLS on the client and HA ports (tls_cert, tls_key) and connect to controllers "
        "and the master over TLS, checking their certificates against tls_ca_file; reloaded on "
        "SIGHUP",
    )
    tls_ca_file: Path | None = field(
        None,
        "with tls_enabled: PEM CA certificates the controllers', other brokers' and (with "
        "tls_verify_client) the clients' certificates must chain to (default: the system's CAs)",
    )
    tls_verify_client: bool = field(
        False,
        "with tls_enabled: mutual TLS inside the cluster: the HA port refuses a peer without a "
        "certificate of tls_ca_file; on the client port a controller's pushes need one (clients "
        "need none)",
    )
    grpc_plaintext_with_tls: bool = field(
        False,
        "with tls_enabled: serve plaintext gRPC on grpc_listen as well (off by default: the "
        "official clients sign only the date-time, without a nonce, so a call on a plaintext "
        "port can be read and replayed within auth_timestamp_window_ms; grpc_tls_listen is the "
        "gRPC port of a broker with tls_enabled)",
    )
    controllers: str = field(
        "", "controller addresses separated by ';' (empty: run alone as master)", address_list
    )
    data_dir: Path = field(
        Path("./var/broker-a"), "store directory (CommitLog, ConsumeQueues, config)"
    )
    metrics_port: int = field(
        9300, "Prometheus /metrics port on the listen host; 0 turns it off", port
    )
    election_priority: int = field(
        0, "lower wins an election among equally up-to-date replicas", at_least(0)
    )
    log_format: str = log_format_field()
    log_level: str = log_level_field()
    flush: str = field(
        "async",
        "async: fsync every flush_interval_ms; sync: group commit before the ack",
        choice("async", "sync"),
    )
    flush_interval_ms: int = field(500, "fsync period under flush = async", at_least(1))
    flush_consumequeue_least_pages: int = field(
        2,
        "a flush fsyncs a ConsumeQueue file only once its new entries cross this many 4 KiB page boundaries (RocketMQ's flushConsumeQueueLeastPages); the others wait for the thorough flush, and recovery after a crash replays the CommitLog into them from the last thorough flush (0: every flush fsyncs every ConsumeQueue file written)",
        at_least(0),
    )
    flush_consumequeue_thorough_interval_ms: int = field(
        60_000,
        "every ConsumeQueue file written is fsynced at least this often, and at a clean stop (RocketMQ's flushConsumeQueueThoroughInterval): what bounds the CommitLog a start after kill -9 or a power loss replays into the ConsumeQueues (0: every flush)",
        at_least(0),
    )
    sync_flush_timeout_ms: int = field(
        5000, "a sync-flush send waiting longer answers FLUSH_DISK_TIMEOUT", at_least(1)
    )
    commitlog_segment_bytes: int = field(
        1 << 30, "size of each pre-allocated CommitLog segment", at_least(64 * 1024)
    )
    consumequeue_segment_entries: int = field(
        300_000, "20-byte entries per ConsumeQueue segment", at_least(16)
    )
    consumequeue_allocate_bytes: int = field(
        64 * 1024,
        "ConsumeQueue files are sparse: each is given disk blocks (posix_fallocate) this many bytes at a time, before entries are written there, so a queue uses disk for what it holds (64 KiB for a few messages, not consumequeue_segment_entries x 20 bytes) and a full disk refuses the write (DISK_FULL) instead of killing the broker; a multiple of 4096",
        _page_multiple,
    )
    consumequeue_open_files: int = field(
        2048,
        "ConsumeQueue segment files kept open for reads and writes past the 4,096 mapped ones; a file not open replaces the least lately used one only when used more often, else it gets the one spare descriptor (a pass over more files than this keeps them open); at most an eighth of the descriptor limit (LimitNOFILE), so the ConsumeQueues hold at most 6,145 descriptors or three eighths of the limit and the spare (0: each read or write opens its file)",
        at_least(0),
    )
    retention_hours: float = field(
        72.0,
        "CommitLog segments older than this are deleted, but none from the oldest scheduled message not delivered yet",
        at_least(0.0),
    )
    disk_max_used_ratio: float = field(
        0.85, "above this disk usage the oldest segments are deleted early", between(0.1, 1.0)
    )
    retention_check_interval_ms: int = field(10_000, "how often retention runs", at_least(100))
    max_message_bytes: int = field(4 * 1024 * 1024, "largest message body accepted", at_least(1))
    index_enable: bool = field(
        True, "keep the key index (lookups by message key: QUERY_MESSAGE, rmqctl queryMsgByKey)"
    )
    index_slots_per_file: int = field(
        250_000, "hash slots per key index file (4 bytes each)", at_least(1)
    )
    index_entries_per_file: int = field(
        1_000_000, "entries per key index file (20 bytes each); a full file is sealed", at_least(1)
    )
    index_file_span_ms: int = field(
        3_600_000,
        "a key index file whose entries span more store time is sealed and a new one begun",
        at_least(1000),
    )
    max_frame_bytes: int = field(
        16 * 1024 * 1024,
        "largest remoting frame accepted; larger closes the connection",
        at_least(1024),
    )
    max_partial_frame_bytes: int = field(
        64 * 1024 * 1024,
        "bytes of incomplete frames all connections may hold together; past it the connection stalled longest mid-frame is closed (at least max_frame_bytes)",
        at_least(1024),
    )
    max_inflight_per_connection: int = field(
        1024, "requests awaiting a response per connection before reading pauses", at_least(1)
    )
    write_buffer_high_bytes: int = field(
        8 * 1024 * 1024, "per-connection write buffer before reading pauses", at_least(64 * 1024)
    )
    default_topic_queues: int = field(
        8, "queues of a topic created without a count", between(1, 1024)
    )
    auto_create_topic: bool = field(True, "create a topic on its first send")
    topic_message_type_check: bool = field(
        False,
        "refuse a message whose type (FIFO, DELAY, TRANSACTION, NORMAL) is not its topic's "
        "message.type (MIXED takes any); off by default, unlike RocketMQ 5's proxy "
        "(enableTopicMessageTypeCheck true), because topics created before the attribute "
        "existed are NORMAL and already take every type",
    )
    max_pull_batch: int = field(256, "most messages one pull returns", at_least(1))
    enable_property_filter: bool = field(
        False,
        "serve SQL92 subscriptions (filters over message properties); off by default, as "
        "RocketMQ's enablePropertyFilter: every message read for one is evaluated, a CPU cost "
        "per message that tag filters do not have",
    )
    max_pull_bytes: int = field(
        4 * 1024 * 1024, "most bytes one pull returns (at least one message)", at_least(1024)
    )
    max_pull_suspend_ms: int = field(
        30_000, "longest a pull may wait for new messages", at_least(0)
    )
    pop_snapshot_records: int = field(
        20_000,
        "POP: the master snapshots its in-flight set after this many revive-log records, "
        "so a new master replays only what follows; 0: never",
        at_least(0),
    )
    client_expiry_ms: int = field(
        10_000,
        "a consumer silent for longer leaves its group (a classic client: 120 s, RocketMQ's "
        "rule, or this if longer)",
        at_least(100),
    )
    all_ack_in_sync_state_set: bool = field(
        True, "controller mode: a send waits until every SyncStateSet member has it"
    )
    min_in_sync_replicas: int = field(
        1, "controller mode: writes are refused while the SyncStateSet is smaller", at_least(1)
    )
    slave_ack_timeout_ms: int = field(
        3000, "an all-ack send waiting longer answers FLUSH_SLAVE_TIMEOUT", at_least(1)
    )
    ha_max_time_slave_not_catchup_ms: int = field(
        15_000, "a SyncStateSet member not caught up this long is removed", at_least(100)
    )
    ha_heartbeat_interval_ms: int = field(
        500, "an idle slave gets an empty transfer this often", at_least(10)
    )
    ha_allow_truncate_below_confirm: bool = field(
        False,
        "operator's decision: a slave may cut acknowledged messages (below its confirm offset) to follow its master; only for one restart after an unclean election",
    )
    broker_heartbeat_interval_ms: int = field(
        200, "heartbeat period to the active controller", at_least(10)
    )
    broker_heartbeat_timeout_ms: int = field(
        1000,
        "the controller declares a silent broker dead after this; a master that cannot reach the controller this long fences itself",
        at_least(100),
    )
    traffic_window_ms: int = field(
        60_000,
        "the traffic report sent with every heartbeat gives messages put per second over this "
        "long (the controllers place topics and re-balance queues by it)",
        at_least(100),
    )
    traffic_report_topics: int = field(
        32,
        "the traffic report names this many of the busiest topics, per queue (the total counts "
        "every topic)",
        between(0, 256),
    )
    replica_info_poll_interval_ms: int = field(
        1000, "how often the group's metadata is polled from the controller", at_least(50)
    )
    route_register_interval_ms: int = field(
        5000, "how often topics are registered with every controller for routes", at_least(100)
    )
    slave_config_sync_interval_ms: int = field(
        1000,
        "how often a slave copies its master's topics, consumer offsets and subscription groups",
        at_least(100),
    )
    consumer_offset_persist_interval_ms: int = field(
        5_000, "how often consumer offsets are written to disk", at_least(100)
    )
    scrub_bytes_per_s: int = field(
        8 << 20,
        "CommitLog bytes a second the background scrub re-reads and checks, repairing damaged "
        'records from the group\'s replicas (docs/operations.md, "Corrupt files"); 0 turns it off',
        at_least(0),
    )
    scrub_interval_hours: float = field(
        168.0,
        "a scrub pass starts no sooner than this after the previous one started (a week, as "
        "Ceph's deep scrub), so an idle broker does not re-read its log over and over; a "
        "restart starts the next pass at once; 0 runs passes back to back",
        at_least(0.0),
    )
    cold_read_bytes_per_s: int = field(
        32 << 20,
        "CommitLog bytes a second that pulls and POPs of records not in the page cache read, "
        "shared by the whole broker: they are read off the event loop at this rate, so a group "
        'catching up from the start of the log cannot stall sends (docs/architecture.md, "Cold '
        'reads"); 0: no limit',
        at_least(0),
    )
    timer_enable: bool = field(
        True,
        "accept and deliver scheduled messages (a delivery time or delay); set it alike on every replica of a group (a slave with it off cannot deliver after a failover)",
    )
    timer_max_delay_ms: int = field(
        40 * 86_400_000,
        "latest delivery time accepted, from the time of the send (default 40 days)",
        at_least(0),
    )
    timer_slot_ms: int = field(
        1000, "timing wheel slot: entries in memory are grouped by this", at_least(1)
    )
    timer_slots_per_bucket: int = field(
        60,
        "slots per far bucket: entries further ahead wait on disk, one bucket head in memory each",
        at_least(1),
    )
    timer_flush_interval_ms: int = field(
        500, "how often the timer log is flushed and its delivery progress saved", at_least(10)
    )
    transaction_check_first_ms: int = field(
        6_000,
        "an unresolved transactional (half) message is first checked back this long after it "
        "was stored",
        at_least(1),
    )
    transaction_check_interval_ms: int = field(
        60_000, "time between two check-backs of an unresolved transaction", at_least(10)
    )
    transaction_check_max: int = field(
        15,
        "check-backs of an unresolved transaction before it is discarded (logged and counted)",
        at_least(0),
    )
    producer_expiry_ms: int = field(
        86_400_000,
        "an idempotent producer that sent nothing for this long is forgotten: a retry of its "
        "older sends is then stored again (docs/idempotence.md)",
        at_least(1000),
    )
    producer_max_windows: int = field(
        100_000,
        "(idempotent producer, queue) pairs whose last sequences the master keeps (about 1.1 "
        "KiB each with single sends, 6 KiB with batches of 64); beyond it the least recently "
        "used producers are forgotten",
        at_least(1),
    )
    producer_snapshot_bytes: int = field(
        64 * 1024 * 1024,
        "the master writes the idempotent producers' state into the CommitLog after this many "
        "bytes of log, so a new master reads at most about this much to rebuild it",
        at_least(1024 * 1024),
    )
    require_producer_token: bool = field(
        True,
        "with auth_enabled: an idempotent producer's send must carry the producerToken the "
        "controllers gave its user for its id and epoch (docs/idempotence.md); turn off only "
        "while controllers or SDKs of an older version, which give or send none, still run. "
        "A token that is sent is always checked",
    )
    idempotence_off_topics: str = field(
        "",
        "comma-separated topics that take no idempotent producers' fields: a send with them "
        "is refused (IDEMPOTENCE_OFF, 5095; the SDK sends it again without) and a retry of "
        "a stored send is stored again; empty: idempotence on for every topic "
        "(docs/idempotence.md)",
    )
    uniq_key_window_topics: str = field(
        "",
        "comma-separated topics with a duplicate window on UNIQ_KEY for clients that cannot "
        "send idempotent producers' fields (the official gRPC clients, classic clients): a "
        "retry of a send stored within uniq_key_window_ms is answered with its offsets, "
        "nothing stored; empty: off (docs/idempotence.md)",
    )
    uniq_key_window_ms: int = field(
        120_000, "how long the UNIQ_KEY duplicate window remembers a send", at_least(1000)
    )
    uniq_key_window_max: int = field(
        100_000,
        "sends the UNIQ_KEY duplicate window remembers at most (about 250 bytes each; the "
        "oldest are forgotten first)",
        at_least(1),
    )

    trace_enabled: bool = field(
        False,
        "write message traces for what this broker sees (a send stored, POP handouts, acks "
        "and changes, retries, DLQ, recalls, transaction ends, scheduled deliveries) to "
        "trace_topic, as RocketMQ's trace records (docs/traces.md); costs an append per batch "
        "of records and, per POP ack, a read when the handout was not seen here",
    )
    trace_topic: str = field(
        "RMQ_SYS_TRACE_TOPIC", "the topic the broker's trace records go to (RocketMQ's name)"
    )
    trace_buffer_records: int = field(
        20_000,
        "trace records held in memory before they are written; beyond it records are "
        "dropped and counted (rmq_broker_trace_dropped_total), never delaying a send",
        at_least(1),
    )

    auth_enabled: bool = field(
        False,
        "authenticate every request (signed with a user's access key and secret, or the "
        "cluster's credentials) and check the user's rules for the topic or group it touches; "
        "needs auth_key_file and controllers (users come from them)",
    )
    auth_key_file: Path | None = field(
        None,
        "file holding the cluster's auth key, the same as the controllers' (not readable by "
        "others): unseals the users' secrets and signs this broker's own requests",
    )
    auth_timestamp_window_ms: int = field(
        60_000,
        "with auth_enabled: a signed request whose timestamp is further than this from this "
        "broker's clock (either way) is refused; also how long nonces are remembered",
        between(1000, 3_600_000),
    )
    auth_refresh_interval_ms: int = field(
        5000,
        "with auth_enabled: how often users and rules are fetched from the controllers when "
        "no heartbeat answer announced a change first",
        at_least(100),
    )

    def __post_init__(self) -> None:
        # Cross-key rules, reported the same way as a bad single key.
        from daemon.config import ConfigError, check_tls_and_auth_key

        if self.max_partial_frame_bytes < self.max_frame_bytes:
            raise ConfigError("config key 'max_partial_frame_bytes' must be >= max_frame_bytes")
        if self.grpc_tls_listen is not None and (self.tls_cert is None or self.tls_key is None):
            raise ConfigError("config key 'grpc_tls_listen' needs tls_cert and tls_key")
        if (
            self.tls_enabled
            and not self.grpc_plaintext_with_tls
            and self.grpc_listen
            not in (
                None,
                "0",
            )
        ):
            raise ConfigError(
                "config key 'grpc_listen' serves plaintext gRPC, off with tls_enabled: set "
                "grpc_plaintext_with_tls = true to serve it anyway, or serve gRPC over TLS on "
                "grpc_tls_listen"
            )
        plain = self.grpc_endpoint
        if plain is not None and self.grpc_tls_listen is not None:
            tls_host, _, tls_port = self.grpc_tls_listen.rpartition(":")
            if plain == (tls_host, int(tls_port)) and plain[1] != 0:
                raise ConfigError(
                    f"config key 'grpc_tls_listen': {self.grpc_tls_listen} is also the plaintext "
                    "gRPC port (grpc_listen, default listen port + 2): give them different ports"
                )
        check_tls_and_auth_key(
            lambda: self.tls_files, TlsError, self.auth_enabled, self.auth_key_file
        )
        if self.auth_enabled and not self.controller_addresses:
            raise ConfigError("config key 'auth_enabled' needs controllers (users come from them)")

    @property
    def tls_files(self) -> TlsFiles | None:
        """The TLS files with tls_enabled (None: plaintext)."""
        return files_from_config(
            enabled=self.tls_enabled,
            cert=self.tls_cert,
            key=self.tls_key,
            ca_file=self.tls_ca_file,
            verify_client=self.tls_verify_client,
            other_tls_port=self.grpc_tls_listen is not None,
        )

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    @property
    def effective_ha_port(self) -> int:
        return self.ha_port if self.ha_port is not None else self.listen_port + 1

    @property
    def grpc_endpoint(self) -> tuple[str, int] | None:
        """Where the plaintext gRPC endpoint listens; None when it is off (``grpc_listen`` 0,
        or ``tls_enabled`` without ``grpc_plaintext_with_tls``)."""
        if self.tls_enabled and not self.grpc_plaintext_with_tls:
            return None
        if self.grpc_listen is None:
            return self.listen_host, self.listen_port + 2
        if self.grpc_listen == "0":
            return None
        host, _, port = self.grpc_listen.rpartition(":")
        return host, int(port)

    @property
    def controller_addresses(self) -> list[str]:
        return [a.strip() for a in self.controllers.split(";") if a.strip()]
