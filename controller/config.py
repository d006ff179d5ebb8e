"""Controller configuration: every key, its type, default and meaning.

The TOML file uses these names; flags override them. The ``## rmq-controller`` section of
``docs/config-reference.md`` is generated from this class (``rmq-controller
--print-config-reference``), so it cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.config import at_least, between, field, log_format_field, log_level_field, port
from remoting.tls import TlsError, TlsFiles, files_from_config

DEFAULT_PEERS = "n0-127.0.0.1:9878"


def parse_peers(value: str) -> dict[str, str]:
    """``"n0-127.0.0.1:9878;n1-127.0.0.1:9868"`` -> ``{"n0": "127.0.0.1:9878", ...}``.

    Raises ValueError naming the bad entry. The id is everything before the first ``-``.
    """
    peers: dict[str, str] = {}
    for raw in value.split(";"):
        item = raw.strip()
        if not item:
            continue
        node_id, sep, address = item.partition("-")
        host, _, port_text = address.rpartition(":")
        if (
            not sep
            or not node_id
            or not host
            or not port_text.isdigit()
            or not 0 < int(port_text) <= 65535
        ):
            raise ValueError(f"bad entry {item!r} (want id-host:port)")
        if len(node_id.encode()) > 255:
            raise ValueError(f"node id {node_id!r} is longer than 255 bytes")
        if node_id in peers:
            raise ValueError(f"node id {node_id!r} appears twice")
        peers[node_id] = address
    if not peers:
        raise ValueError("no peer given")
    return peers


def _peers(value: Any) -> str | None:
    try:
        parse_peers(str(value))
    except ValueError as exc:
        return f"must be id-host:port entries separated by ';': {exc}"
    return None


def _node_id(value: Any) -> str | None:
    text = str(value)
    if not text or "-" in text or ";" in text or len(text.encode()) > 255:
        return "must be a non-empty id without '-' or ';'"
    return None


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    id: str = field("n0", "this controller's node id; must be one of peers", _node_id)
    peers: str = field(
        DEFAULT_PEERS,
        "controllers as id-host:port separated by ';'; this node serves on its own entry",
        _peers,
    )
    join: bool = field(
        False,
        "start empty and wait to be added (rmqctl addController) instead of founding the group "
        "from peers; peers must still list the running members",
    )
    data_dir: Path = field(Path("./var/controller-n0"), "Raft log, hard state and snapshots")
    metrics_port: int = field(
        9200, "Prometheus /metrics port on this node's host; 0 turns it off", port
    )
    log_format: str = log_format_field()
    log_level: str = log_level_field()
    group: str = field("DefaultControllerGroup", "name of the Raft group (getControllerMetaData)")
    tick_ms: int = field(
        100, "Raft tick; heartbeats and election timeouts count ticks", at_least(1)
    )
    heartbeat_ticks: int = field(1, "a Raft leader heartbeats every this many ticks", at_least(1))
    election_ticks_min: int = field(
        3, "lower bound of the randomised election timeout, in ticks", at_least(2)
    )
    election_ticks_max: int = field(
        6, "upper bound (inclusive) of the randomised election timeout, in ticks", at_least(2)
    )
    preferred_leader: str = field(
        "", "node id that takes leadership back whenever it is healthy (same on every node)"
    )
    snapshot_every: int = field(
        10_000,
        "snapshot the state machine and compact the log every this many entries",
        at_least(1),
    )
    raft_segment_bytes: int = field(
        64 * 1024 * 1024, "size at which a Raft log segment file is rolled", at_least(4096)
    )
    fsync: bool = field(True, "fsync the Raft log (turn off only for throwaway test clusters)")
    max_append_bytes: int = field(
        1024 * 1024, "most entry bytes one AppendEntries carries", at_least(1024)
    )
    max_inflight_appends: int = field(
        64, "appends in flight per follower (pipelining window)", at_least(1)
    )
    peer_queue_messages: int = field(
        4096, "Raft messages queued per peer before the oldest are dropped", at_least(16)
    )
    broker_heartbeat_timeout_ms: int = field(
        1000,
        "a broker silent this long is inactive (brokers may send their own timeout); also the "
        "grace period of a newly active controller and the longest write lease a heartbeat's answer "
        "grants a master",
        at_least(100),
    )
    broker_heartbeat_timeout_max_ms: int = field(
        10_000,
        "largest heartbeatTimeoutMillis a broker may ask for; a larger one counts as this "
        "(a forged huge timeout cannot keep a dead master alive)",
        at_least(100),
    )
    require_register_check_code: bool = field(
        True,
        "CONTROLLER_REGISTER_BROKER must carry the broker's registerCheckCode (every broker of "
        "this version sends it; turn off only while brokers of an older version still run); a "
        "code that is sent is always checked",
    )
    require_producer_token: bool = field(
        True,
        "with auth_enabled: a producer taking its id up again (producer_id_file) must send the "
        "ownerToken it was issued with for its user (docs/idempotence.md); turn off only while "
        "SDKs of an older version, which keep none, still run. A token that is sent is always "
        "checked",
    )
    scan_interval_ms: int = field(
        100, "how often the active controller looks for groups that need an election", at_least(10)
    )
    enable_elect_unclean_master: bool = field(
        False, "elect among all alive replicas when no SyncStateSet member is alive (may lose data)"
    )
    first_election_wait_ms: int = field(
        10_000,
        "a group the controllers hold no master for whose replicas report stored data (its "
        "metadata was cleaned, or the controllers' was lost) elects its first master this long "
        "after the first of them is heard, the one holding the most of those heard by then; 0 "
        "elects the first at once. A group's first start (no data) is never held",
        at_least(0),
    )
    route_expiry_ms: int = field(
        15_000,
        "a broker's topic registration (REGISTER_BROKER) expires this long after the last one",
        at_least(100),
    )
    request_timeout_ms: int = field(
        3000, "a write waits this long for its entry to commit before answering busy", at_least(100)
    )
    max_inflight_proposals: int = field(
        256,
        "write requests whose Raft entries are proposed and not yet applied; past it a write "
        "is answered SYSTEM_BUSY (2, retriable) at once (load shedding)",
        at_least(1),
    )
    max_inflight_proposal_bytes: int = field(
        8 * 1024 * 1024,
        "bytes of Raft entries proposed and not yet applied; past it a write is answered "
        "SYSTEM_BUSY (2, retriable) at once (one larger write is admitted alone)",
        at_least(1024),
    )
    notify_timeout_ms: int = field(
        1000, "timeout of one NOTIFY_BROKER_ROLE_CHANGED push to a broker", at_least(10)
    )
    static_item_check_interval_ms: int = field(
        60_000,
        "how often the active controller asks the groups whether retention deleted a static "
        "topic's old (sealed) items, and drops those from the mapping",
        at_least(100),
    )
    rebalance_enabled: bool = field(
        False,
        "the automatic re-balance: the active controller moves static topic queues from the "
        "busiest broker group to the idlest, one at a time, while their traffic spread stays "
        "above rebalance_threshold (docs/operations.md)",
    )
    rebalance_threshold: float = field(
        5000.0,
        "msg/s: groups whose traffic (messages put per second) differs by at most this are "
        "balanced; also rmqctl rebalancePlan's default",
        at_least(0),
    )
    rebalance_hold_ms: int = field(
        600_000,
        "the spread must stay above rebalance_threshold this long before a move (and again "
        "after each move, once the brokers' figures show it)",
        at_least(0),
    )
    rebalance_interval_ms: int = field(
        5000, "how often the active controller checks the traffic spread", at_least(100)
    )
    rebalance_dry_run: bool = field(
        False,
        "with rebalance_enabled: log the plan (and count it) instead of moving queues",
    )
    max_frame_bytes: int = field(
        16 * 1024 * 1024,
        "largest remoting frame accepted; larger closes the connection",
        between(64 * 1024, 1 << 30),
    )
    auth_key_file: Path | None = field(
        None,
        "file holding the cluster's auth key (at least 32 bytes, e.g. 32 random bytes in base64; "
        "the same file on every controller, not readable by others): user secrets are stored "
        "sealed under it; unset, users with secrets cannot be created",
    )
    auth_enabled: bool = field(
        False,
        "authenticate every request (signed with a user's access key and secret, or the "
        "cluster's credentials derived from auth_key_file) and allow the admin commands to "
        "super users only; needs auth_key_file",
    )
    auth_timestamp_window_ms: int = field(
        60_000,
        "with auth_enabled: a signed request whose timestamp is further than this from this "
        "controller's clock (either way) is refused; also how long nonces are remembered",
        between(1000, 3_600_000),
    )
    tls_enabled: bool = field(
        False,
        "serve TLS on this controller's port (tls_cert, tls_key) and reach the other "
        "controllers and the brokers over TLS, checking their certificates against "
        "tls_ca_file; reloaded on SIGHUP",
    )
    tls_cert: Path | None = field(
        None,
        "with tls_enabled: PEM certificate chain of this controller (also presented as its "
        "client certificate)",
    )
    tls_key: Path | None = field(
        None,
        "with tls_enabled: PEM private key of tls_cert (not readable by anyone: a controller "
        "refuses to start with a world-readable key)",
    )
    tls_ca_file: Path | None = field(
        None,
        "with tls_enabled: PEM CA certificates the other controllers', the brokers' and (with "
        "tls_verify_client) the client certificates must chain to (default: the system's CAs)",
    )
    tls_verify_client: bool = field(
        False,
        "with tls_enabled: mutual TLS inside the cluster: Raft messages, requests signed as the "
        "cluster and the brokers' registration, heartbeat and SyncStateSet requests need a "
        "client certificate of tls_ca_file (clients and rmqctl need none)",
    )
    max_partial_frame_bytes: int = field(
        64 * 1024 * 1024,
        "bytes of incomplete frames all connections may hold together; past it the connection stalled longest mid-frame is closed (at least max_frame_bytes)",
        at_least(64 * 1024),
    )

    def __post_init__(self) -> None:
        # Cross-key rules, reported the same way as a bad single key.
        from daemon.config import ConfigError, check_tls_and_auth_key

        peers = parse_peers(self.peers)
        if self.id not in peers:
            raise ConfigError(f"config key 'id' {self.id!r} is not one of peers {sorted(peers)}")
        if self.election_ticks_max < self.election_ticks_min:
            raise ConfigError("config key 'election_ticks_max' must be >= election_ticks_min")
        if self.election_ticks_min <= self.heartbeat_ticks:
            raise ConfigError("config key 'election_ticks_min' must be > heartbeat_ticks")
        if self.broker_heartbeat_timeout_max_ms < self.broker_heartbeat_timeout_ms:
            raise ConfigError(
                "config key 'broker_heartbeat_timeout_max_ms' must be >= "
                "broker_heartbeat_timeout_ms"
            )
        if self.preferred_leader and _node_id(self.preferred_leader) is not None:
            raise ConfigError("config key 'preferred_leader' must be a node id")
        if self.max_partial_frame_bytes < self.max_frame_bytes:
            raise ConfigError("config key 'max_partial_frame_bytes' must be >= max_frame_bytes")
        check_tls_and_auth_key(
            lambda: self.tls_files, TlsError, self.auth_enabled, self.auth_key_file
        )

    @property
    def tls_files(self) -> TlsFiles | None:
        """The TLS files with tls_enabled (None: plaintext)."""
        return files_from_config(
            enabled=self.tls_enabled,
            cert=self.tls_cert,
            key=self.tls_key,
            ca_file=self.tls_ca_file,
            verify_client=self.tls_verify_client,
        )

    @property
    def peer_map(self) -> dict[str, str]:
        return parse_peers(self.peers)

    @property
    def address(self) -> str:
        """This node's host:port (its entry in peers)."""
        return self.peer_map[self.id]

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])
