"""One controller process: server, Raft driver, metadata state machine, service, metrics."""

from __future__ import annotations

import structlog

from controller.config import ControllerConfig
from controller.metrics import ControllerMetrics
from controller.nameserver import NameServerDoor
from controller.raft_driver import DriverConfig, RaftDriver
from controller.service import ControllerService
from controller.service.auth import ControllerUsers
from controller.state_machine import MetadataStateMachine
from daemon.auth_key import load_auth_key
from daemon.metrics import serve_metrics
from protocol.codes import ControllerCode, RequestCode
from protocol.request_auth import Credentials, cluster_credentials
from protocol.rocketmq_remoting.acl import nameserver_checks
from remoting.classic_auth import classic_authorizer
from remoting.classic_door import ClassicDoor, auth_refusal
from remoting.client import use_tls
from remoting.ports import check_port_free
from remoting.server import RemotingServer, ServerLimits
from remoting.tls import ClientCertGate, DaemonTls, reload_tls

log = structlog.get_logger(__name__)


def cluster_credentials_of(cfg: ControllerConfig) -> Credentials | None:
    """The cluster's credentials when authentication is on (None: the cluster's own traffic
    goes unsigned, as every request)."""
    if not cfg.auth_enabled or cfg.auth_key_file is None:
        return None
    return cluster_credentials(load_auth_key(cfg.auth_key_file))


def driver_config(cfg: ControllerConfig) -> DriverConfig:
    return DriverConfig(
        node_id=cfg.id,
        peers=cfg.peer_map,
        data_dir=cfg.data_dir,
        join=cfg.join,
        tick_ms=cfg.tick_ms,
        heartbeat_ticks=cfg.heartbeat_ticks,
        election_ticks_min=cfg.election_ticks_min,
        election_ticks_max=cfg.election_ticks_max,
        preferred_leader=cfg.preferred_leader or None,
        snapshot_every=cfg.snapshot_every,
        segment_bytes=cfg.raft_segment_bytes,
        fsync=cfg.fsync,
        max_append_bytes=cfg.max_append_bytes,
        max_inflight=cfg.max_inflight_appends,
        peer_queue_messages=cfg.peer_queue_messages,
        max_frame_bytes=cfg.max_frame_bytes,
        credentials=cluster_credentials_of(cfg),
    )


#: What only brokers and controllers send here: with ``tls_verify_client`` a connection without
#: a client certificate is refused them (RAFT_MESSAGE is always among them).
INTERNAL_CODES = (
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
    RequestCode.CONTROLLER_APPLY_BROKER_ID,
    RequestCode.CONTROLLER_REGISTER_BROKER,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
    RequestCode.BROKER_HEARTBEAT,
    RequestCode.REGISTER_BROKER,
    ControllerCode.AUTH_SYNC_USERS,
)


class Controller:
    """Construct (opens and recovers the Raft storage), then ``start()`` and ``stop()``."""

    def __init__(self, cfg: ControllerConfig) -> None:
        self.cfg = cfg
        self.metrics = ControllerMetrics()
        self.server = RemotingServer(
            ServerLimits(
                max_frame_bytes=cfg.max_frame_bytes,
                max_partial_frame_bytes=cfg.max_partial_frame_bytes,
            ),
            name="controller",
        )
        # Ports before storage: a port in use must not leave a new Raft group written behind.
        self.port = self.server.bind(cfg.host, cfg.port)
        try:
            check_port_free(cfg.host, cfg.metrics_port, "metrics")
            self.state_machine = MetadataStateMachine()
            self.driver = RaftDriver(driver_config(cfg), self.state_machine, observer=self.metrics)
            self.state_machine.replayed_through = self.driver.replayed_through
        except BaseException:
            self.server.unbind()
            raise
        self.metrics.bind(self.driver)
        self.metrics.bind_server(self.server)
        self.server.register(ControllerCode.RAFT_MESSAGE, self.driver.handle_raft_frame)
        self.service = ControllerService(cfg, self.driver, self.state_machine, self.metrics)
        self.service.register(self.server)
        # RocketMQ's classic clients find the NameServer requests here too (docs/protocol.md).
        self.classic = ClassicDoor(
            "controller", cfg.max_frame_bytes, refusal=auth_refusal(cfg.auth_enabled)
        )
        NameServerDoor(self.service.topics).register(self.classic)
        if self.service.auth_key is not None and self.service.cluster_credentials is not None:
            # with authentication on: RocketMQ's ACL signature, then our controllers' rules
            metrics = self.metrics
            self.classic.authorizer = classic_authorizer(
                ControllerUsers(self.service.manager, self.service.auth_key),
                lambda cmd: nameserver_checks(cmd.code, cmd.ext_fields, cmd.body),
                lambda reason: metrics.auth_refused.labels(reason=reason).inc(),
            )
        self.server.second_door = self.classic
        files = cfg.tls_files
        self.tls = DaemonTls(files) if files is not None else None
        if self.tls is not None and files is not None and files.verify_client:
            refused = self.metrics.auth_refused
            self.server.guard = ClientCertGate(
                self.server.guard,
                INTERNAL_CODES,
                lambda reason: refused.labels(reason=reason).inc(),
                server="controller",
            )
        self.metrics_port: int | None = None

    async def start(self) -> None:
        cfg = self.cfg
        tls = self.tls
        if tls is not None:  # Raft peers and pushes to brokers go over TLS, as the port serves
            use_tls(lambda: tls.client)
        self.port = await self.server.start(
            cfg.host, cfg.port, tls.shared_listener if tls is not None else None
        )
        await self.driver.start()
        await self.service.start()
        self.metrics_port = serve_metrics(self.metrics.registry, cfg.host, cfg.metrics_port)
        status = self.driver.status()
        log.info(
            "controller serving",
            id=cfg.id,
            address=f"{cfg.host}:{self.port}",
            group=cfg.group,
            voters=list(status.conf_state.voters),
            learners=list(status.conf_state.learners),
            term=status.term,
            last_index=status.last_index,
            snapshot_index=self.driver.storage.snapshot_meta().index,
            metrics_port=self.metrics_port,
            data_dir=str(cfg.data_dir),
            join=cfg.join,
            tls=tls is not None,
        )

    def reload(self) -> None:
        """SIGHUP: read the TLS files again (new connections use them)."""
        reload_tls(self.tls, "controller")

    async def stop(self) -> None:
        await self.service.stop()
        await self.server.stop()
        await self.driver.stop()
        if self.tls is not None:
            use_tls(None)
        log.info("controller stopped", id=self.cfg.id)
