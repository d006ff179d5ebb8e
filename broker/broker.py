"""The broker: wires the store service, request processors, server and metrics together."""

from __future__ import annotations

import asyncio
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from broker.auth.guard import broker_guard
from broker.auth.users import BrokerUsers
from broker.broker_stats import sample
from broker.classic import classic_door
from broker.classic.auth import classic_authorizer
from broker.compose import compose
from broker.config import BrokerConfig
from broker.consumer_stats import LagAtScrape
from broker.ha.config import HAConfig
from broker.ha.service import HAService
from broker.identity import IdentityError, check_identity_files
from broker.live_config import LiveConfig
from broker.live_file import LiveFileError
from broker.message_service import max_record_bytes
from broker.metrics import BrokerMetrics, BrokerReadings
from broker.offsets_persist import persist_offsets
from broker.processors.admin import AdminProcessor
from broker.processors.broker_config import BrokerConfigProcessor
from broker.processors.broker_stats import BrokerStatsProcessor
from broker.processors.clients import ClientProcessor
from broker.processors.consumer_stats import ConsumerStatsProcessor
from broker.processors.dlq import DeadLetterProcessor
from broker.processors.offset_reset import OffsetResetProcessor
from broker.processors.pop import PopProcessor
from broker.processors.producers import ProducerProcessor
from broker.processors.pull import PullProcessor
from broker.processors.query import QueryProcessor
from broker.processors.recall import RecallProcessor
from broker.processors.replication import ReplicationProcessor
from broker.processors.route import RouteProcessor
from broker.processors.send import SendProcessor
from broker.processors.send_back import SendBackProcessor
from broker.processors.static_queues import StaticQueueProcessor
from broker.processors.subscription_groups import SubscriptionGroupProcessor
from broker.processors.topic_admin import TopicAdminProcessor
from broker.processors.transaction import TransactionProcessor
from broker.repair.scrub import Scrubber, export_metrics, export_repair_metrics
from broker.replicas_manager import ReplicasManager
from broker.static_forward import StaticForwarder
from daemon.logs import set_level as set_log_level
from daemon.metrics import serve_metrics
from protocol.codes import RequestCode
from protocol.ha_auth import ha_key
from protocol.producer_token import SendTokens, token_key
from remoting.client import use_tls
from remoting.ports import PortUnavailable, check_port_free
from remoting.server import Connection, RemotingServer, ServerLimits
from remoting.tls import ClientCertGate, DaemonTls, TlsError, reload_tls
from storage.data_dir_owner import DataDirOwner
from storage.data_dir_owner import claim as claim_data_dir
from storage.epoch_file import EpochFile, EpochFileError
from storage.errors import StoreError

if TYPE_CHECKING:
    from broker.grpc.service import GrpcEndpoint

log = structlog.get_logger(__name__)


class StartRefused(Exception):
    """The broker cannot start on this data directory: one line for the operator, exit 2."""


def check_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` if needed and prove it writable (a file created, fsynced, removed);
    raises :class:`StartRefused` before anything else is written."""
    probe = data_dir / ".write-probe"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, b"probe")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise StartRefused(
            f"data directory {data_dir} is not writable: {exc.strerror or exc}"
        ) from None


#: What only controllers send to a broker: with ``tls_verify_client`` a connection without a
#: client certificate is refused them (GET_BROKER_EPOCH_CACHE is a read rmqctl's getBrokerEpoch
#: sends too).
INTERNAL_CODES = (RequestCode.NOTIFY_BROKER_ROLE_CHANGED,)


class Broker:
    def __init__(self, cfg: BrokerConfig, config_file: Path | None = None) -> None:
        """``config_file``: the TOML file ``cfg`` was read from (None: defaults and flags), named
        by GET_BROKER_CONFIG and never written. The live changes kept in the data directory are
        applied over ``cfg`` first, before any part is built from it (:mod:`broker.live_config`);
        :class:`StartRefused` when their file cannot be read."""
        try:
            self.live_config = LiveConfig.start(cfg, config_file)
        except LiveFileError as exc:
            raise StartRefused(str(exc)) from None
        if "log_level" in self.live_config.entries:
            set_log_level(cfg.log_level)  # logging was set up from the config file's level
        self.cfg = cfg
        self.metrics = BrokerMetrics(cfg.cluster, cfg.broker_name)
        self.ctx = compose(cfg, self.metrics)
        ctx = self.ctx
        self.consumer_lag = LagAtScrape(ctx)
        self.metrics.bind(
            BrokerReadings(
                role=lambda: ctx.role_cell.current,
                assigned_ids=ctx.controller_mode,
                data_dir=cfg.data_dir,
                corruption=lambda: dict(ctx.store.corruption),
                max_offset=lambda: ctx.store.max_offset,
                replication=lambda: ctx.ha,
                consumer_lag=self.consumer_lag,
            )
        )
        self.server = RemotingServer(
            ServerLimits(
                max_frame_bytes=cfg.max_frame_bytes,
                max_partial_frame_bytes=cfg.max_partial_frame_bytes,
                max_inflight=cfg.max_inflight_per_connection,
                write_buffer_high=cfg.write_buffer_high_bytes,
            ),
            name="broker",
        )
        self.admin = AdminProcessor(self.ctx)
        for processor in (
            SendProcessor(self.ctx),
            StaticQueueProcessor(self.ctx),
            PullProcessor(self.ctx),
            self.admin,
            ClientProcessor(self.ctx),
            RouteProcessor(self.ctx),
            ConsumerStatsProcessor(self.ctx),
            QueryProcessor(self.ctx),
            RecallProcessor(self.ctx),
            SubscriptionGroupProcessor(self.ctx),
            TopicAdminProcessor(self.ctx),
            SendBackProcessor(self.ctx),
            DeadLetterProcessor(self.ctx),
            PopProcessor(self.ctx, self.ctx.pop),
            TransactionProcessor(self.ctx, self.ctx.transactions),
            resets := OffsetResetProcessor(self.ctx),
        ):
            processor.register(self.server)
        # RocketMQ's classic clients on the same port, told apart on their first bytes.
        classic = self.server.second_door = classic_door(self.ctx, self.admin)
        resets.foreign = lambda: {id(s.conn) for s in classic.sessions}
        files = cfg.tls_files
        self.tls = DaemonTls(files) if files is not None else None
        tls = self.tls
        self.ha: HAService | None = None
        self.replicas: ReplicasManager | None = None
        self.users: BrokerUsers | None = None
        self._loaded = False
        self._serving = False
        if self.ctx.controller_mode:
            try:
                epochs = EpochFile(cfg.data_dir)
            except EpochFileError as exc:
                raise StartRefused(f"epoch file: {exc}") from None
            self.ha = HAService(
                self.ctx.store,
                epochs,
                HAConfig(
                    listen_host=cfg.listen_host,
                    listen_port=cfg.effective_ha_port,
                    max_time_slave_not_catchup_ms=cfg.ha_max_time_slave_not_catchup_ms,
                    heartbeat_interval_ms=cfg.ha_heartbeat_interval_ms,
                    allow_truncate_below_confirm=cfg.ha_allow_truncate_below_confirm,
                    auth_key=(
                        ha_key(self.ctx.auth_key)
                        if self.ctx.cluster_credentials is not None and self.ctx.auth_key
                        else None
                    ),
                    server_tls=tls.internal_listener if tls is not None else None,
                    client_tls=(lambda: tls.client) if tls is not None else None,
                ),
                propose_sync_state_set=self._propose_sync_state_set,
                append_replicated=self.ctx.appender.append_replicated,
            )
            self.ctx.attach_ha(self.ha)
            # Parked pulls wake when messages become visible (the confirm offset moved).
            self.ha.add_confirm_listener(lambda _offset: self.ctx.waiters.notify_all())
            self.replicas = ReplicasManager(self.ctx, self.ha)
            self.ctx.topic_listeners.append(self.replicas.topics_changed)
            self.ctx.timer.forward = StaticForwarder(
                self.replicas.controllers, self.replicas.pool, cfg.broker_name
            ).forward
            if ctx.cluster_credentials is not None and ctx.auth_key is not None:
                self.users = BrokerUsers(
                    ctx.auth_key,
                    self.replicas.controllers,
                    cfg.auth_refresh_interval_ms / 1000,
                )
                self.replicas.on_auth_digest = self.users.announced
                # idempotent producers' ids must be ones the controllers issued
                ctx.sends.issued.enabled = True
                # ... and issued to the user who signs the send (protocol/producer_token.py)
                ctx.sends.tokens = SendTokens(
                    token_key(ctx.auth_key), required=cfg.require_producer_token
                )
                self.replicas.on_producer_id_limit = ctx.sends.issued.told
                self.server.guard = broker_guard(
                    self.users,
                    ctx.cluster_credentials,
                    cfg.cluster,
                    cfg.auth_timestamp_window_ms,
                    self.metrics,
                )
                classic.authorizer = classic_authorizer(self.users, cfg.cluster, self.metrics)
        ReplicationProcessor(self.ctx, self.replicas).register(self.server)
        self._follow_live_config(self.live_config)
        BrokerConfigProcessor(self.live_config).register(self.server)
        BrokerStatsProcessor(self.ctx).register(self.server)
        ProducerProcessor(self.ctx).register(self.server)
        if files is not None and files.verify_client:
            self.server.guard = ClientCertGate(
                self.server.guard, INTERNAL_CODES, self.metrics.auth_refusal, server="broker"
            )
        self.server.on_open.append(self._opened)
        self.server.on_close.append(self._closed)
        self.metrics.bind_server(self.server)
        self._tasks: list[asyncio.Task[None]] = []
        self.port = 0
        self.metrics_port: int | None = None
        self.grpc: GrpcEndpoint | None = None
        self.grpc_port: int | None = None
        self.grpc_tls_port: int | None = None

    def _follow_live_config(self, live: LiveConfig) -> None:
        """The parts that copied a live key's value when they were built follow its changes
        (the others read ``cfg`` at each use)."""
        store = self.ctx.store

        def retention_hours(value: float) -> None:
            store.config.retention_hours = value

        def disk_max_used_ratio(value: float) -> None:
            store.config.disk_max_used_ratio = value

        def max_message_bytes(value: int) -> None:
            store.set_max_message_bytes(max_record_bytes(value))
            if self.grpc is not None:
                service = self.grpc.service
                service.max_body_bytes = value
                service.publisher.max_body_bytes = value
                service.telemetry.max_body_bytes = value

        def auth_refresh(value: int) -> None:
            if self.users is not None:
                self.users.set_interval(value / 1000)

        live.on_change("log_level", set_log_level)
        live.on_change("retention_hours", retention_hours)
        live.on_change("disk_max_used_ratio", disk_max_used_ratio)
        live.on_change("max_message_bytes", max_message_bytes)
        live.on_change("client_expiry_ms", self.ctx.groups.set_expiry_ms)
        live.on_change("auth_refresh_interval_ms", auth_refresh)

    def reload(self) -> None:
        """SIGHUP: read the TLS files again (new connections use them), the gRPC TLS port's
        too."""
        grpc = self.grpc
        certificate = grpc.certificate if grpc is not None else None
        if self.tls is not None or certificate is None:
            reload_tls(self.tls, "broker")
        if certificate is not None:
            from broker.grpc.tls_port import reload_logged  # grpcio: loaded with the endpoint

            reload_logged(certificate)

    async def start(self) -> None:
        cfg = self.cfg
        tls = self.tls
        if tls is not None:  # every port of the cluster serves TLS: connect to them over it
            use_tls(lambda: tls.client)
        # Every port first: a port in use must be found before anything is written. The other
        # ports are checked before the client port is taken, so a broker that refuses to start
        # for a port never accepted a connection on its client port.
        if self.ha is not None:
            check_port_free(cfg.listen_host, cfg.effective_ha_port, "HA")
        check_port_free(cfg.listen_host, cfg.metrics_port, "metrics")
        grpc_at = self._grpc_endpoint()
        if grpc_at is not None:
            check_port_free(grpc_at[0], grpc_at[1], "gRPC")
        if cfg.grpc_tls_listen is not None:
            tls_host, _, tls_port = cfg.grpc_tls_listen.rpartition(":")
            check_port_free(tls_host, int(tls_port), "gRPC TLS")
            for pem in (cfg.tls_cert, cfg.tls_key):
                if pem is not None and not pem.is_file():
                    raise StartRefused(f"gRPC TLS: {pem} is not a readable file")
        self.port = self.server.bind(cfg.listen_host, cfg.listen_port)
        check_data_dir(cfg.data_dir)
        try:
            claim_data_dir(cfg.data_dir, DataDirOwner(cfg.cluster, cfg.broker_name))
        except StoreError as exc:  # another group's directory, or an unreadable owner file
            raise StartRefused(str(exc)) from None
        try:
            self.live_config.save_dropped()  # the directory is this broker's: drop stale entries
        except OSError as exc:
            raise StartRefused(
                f"cannot write {self.live_config.live_file}: {exc.strerror or exc}"
            ) from None
        if self.replicas is not None:
            try:
                check_identity_files(cfg.data_dir)
            except IdentityError as exc:
                raise StartRefused(str(exc)) from None
        try:
            self.ctx.topics.load()
            self.ctx.offsets.load()
            self.ctx.sub_groups.load()
            self.ctx.dlq_resent.load()
        except StoreError as exc:  # both copies of a config file fail their checksums
            raise StartRefused(str(exc)) from None
        self._loaded = True
        try:
            await self.ctx.service.start()
        except StoreError as exc:
            raise StartRefused(f"message store: {exc}") from None
        store = self.ctx.store
        if self.ha is None:
            store.confirm_offset = store.max_offset  # a lone master confirms what it stores
        timer = self.ctx.timer
        try:
            timer.open()
        except StoreError as exc:
            raise StartRefused(f"timer: {exc}") from None
        self.ctx.appender.replicated_listeners.append(timer.replicated)
        self.ctx.service.retention_floor = timer.retention_floor
        store.truncate_listeners.append(timer.truncated)
        self.metrics.gauge_fn(
            "rmq_broker_timer_pending",
            "Scheduled messages waiting for their delivery time",
            lambda: timer.pending_count,
        )
        self.metrics.gauge_fn(
            "rmq_broker_commitlog_max_offset_bytes",
            "CommitLog write position",
            lambda: store.max_offset,
        )
        self.metrics.gauge_fn(
            "rmq_broker_commitlog_min_offset_bytes",
            "First CommitLog offset retained",
            lambda: store.min_offset,
        )
        self.metrics.gauge_fn(
            "rmq_broker_commitlog_flushed_offset_bytes",
            "CommitLog offset known durable",
            lambda: self.ctx.service.flushed_offset,
        )
        self.metrics.gauge_fn(
            "rmq_broker_topics", "Topics configured", lambda: len(self.ctx.topics.all())
        )
        if self.ha is not None:
            await self.ha.start()
        self.port = await self.server.start(
            cfg.listen_host, cfg.listen_port, tls.shared_listener if tls is not None else None
        )
        if self.replicas is not None:
            self.replicas.start()
        if self.users is not None:
            self.users.start()
        self.consumer_lag.start()
        self.metrics_port = serve_metrics(self.metrics.registry, cfg.listen_host, cfg.metrics_port)
        if grpc_at is not None or cfg.grpc_tls_listen is not None:
            await self._start_grpc(grpc_at)
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
        if self.replicas is None:
            # A lone broker scrubs too (the ReplicasManager runs it in controller mode): it
            # finds damage before a consumer does, with no replica to repair it from.
            scrubber = Scrubber(
                store.repairs,
                None,
                lambda: cfg.scrub_bytes_per_s,
                lambda: cfg.scrub_interval_hours * 3600.0,
            )
            export_metrics(self.metrics, scrubber)
            export_repair_metrics(self.metrics, None)
            self._tasks.append(asyncio.create_task(scrubber.run(), name="scrub"))
        timer.start()
        self.ctx.pop.start()
        self.ctx.transactions.start()
        if self.ctx.tracer is not None:
            if self.ctx.role_cell.current.is_master:  # clients' trace records go there too
                self.ctx.ensure_system_topic(cfg.trace_topic)
            self.ctx.tracer.writer.start()
        self._serving = True
        log.info(
            "broker serving",
            cluster=cfg.cluster,
            broker_name=cfg.broker_name,
            listen=f"{cfg.listen_host}:{self.port}",
            metrics_port=self.metrics_port,
            grpc_port=self.grpc_port,
            grpc_tls_port=self.grpc_tls_port,
            data_dir=str(cfg.data_dir),
            flush=cfg.flush,
            max_offset=store.max_offset,
            mode="controller" if self.ha is not None else "standalone",
            ha_address=self.ha.address if self.ha is not None else None,
        )

    def _grpc_endpoint(self) -> tuple[str, int] | None:
        """Where the gRPC endpoint listens (None: off). With an ephemeral listen port (0) the
        default endpoint is ephemeral too."""
        cfg = self.cfg
        at = cfg.grpc_endpoint
        if at is not None and cfg.grpc_listen is None and cfg.listen_port == 0:
            return cfg.listen_host, 0
        return at

    async def _start_grpc(self, plain: tuple[str, int] | None) -> None:
        cfg = self.cfg
        # Imported here so a broker with the endpoint off never loads grpcio.
        from broker.grpc.access import CallGuard
        from broker.grpc.here import Here
        from broker.grpc.service import GrpcEndpoint, MessagingService
        from broker.grpc.to_master import Master
        from broker.recall_scheduled import recall_scheduled
        from broker.transaction.ending import end_transaction

        local = f"{cfg.listen_host}:{self.port}"
        ctx = self.ctx

        def master_address() -> str:
            role = ctx.role
            return local if role.is_master else role.master_address

        def master_now() -> Master:
            role = ctx.role
            if role.is_master:
                return Master(local, role.master_epoch, is_self=True)
            return Master(role.master_address, role.master_epoch)

        service = MessagingService(
            local_address=local,
            route_addresses=cfg.controller_addresses or [local],
            max_body_bytes=cfg.max_message_bytes,
            broker_name=cfg.broker_name,
            master_address=master_address,
            master_now=master_now,
            check_types=cfg.topic_message_type_check,
            # With authentication on: every call verified and authorized against the users
            # cached from the controllers, then forwarded signed as the cluster.
            credentials=ctx.cluster_credentials,
            guard=(
                None
                if self.users is None
                else CallGuard(
                    self.users,
                    window_ms=cfg.auth_timestamp_window_ms,
                    on_refused=self.metrics.auth_refusal,
                )
            ),
            # While this broker is the master, sends, transaction ends, recalls, acks and changes
            # of invisible time are served in-process by the code the remoting processors call.
            here=Here(
                is_master=lambda: ctx.role.is_master,
                sends=ctx.sends,
                end_transaction=partial(end_transaction, ctx.transactions),
                recall=partial(recall_scheduled, ctx.gate, ctx.timer),
                pop=ctx.pop,
                durability=ctx,
            ),
        )
        tls = None
        if cfg.grpc_tls_listen is not None and cfg.tls_cert is not None and cfg.tls_key:
            host, _, port = cfg.grpc_tls_listen.rpartition(":")
            tls = (host, int(port), cfg.tls_cert, cfg.tls_key)
        self.grpc = GrpcEndpoint(service)
        try:
            await self.grpc.start(plain, tls)
        except RuntimeError as exc:  # grpcio could not bind
            where = f"{plain[0]}:{plain[1]}" if plain is not None else cfg.grpc_tls_listen
            raise PortUnavailable(f"gRPC port {where}: {exc}") from None
        except (OSError, TlsError) as exc:
            raise StartRefused(f"gRPC TLS certificate or key: {exc}") from None
        if plain is not None:
            self.grpc_port = self.grpc.port
            ctx.grpc_endpoints["plain"] = f"{plain[0]}:{self.grpc.port}"
            if self.users is not None:
                log.warning(
                    "plaintext gRPC port with authentication on",
                    grpc_port=self.grpc_port,
                    why=(
                        "the official clients sign only the date-time, without a nonce: a call "
                        "on this port can be read and replayed within auth_timestamp_window_ms"
                    ),
                    fix=(
                        "serve gRPC over TLS (grpc_tls_listen) and turn this port off "
                        "(grpc_listen = 0; with tls_enabled: without grpc_plaintext_with_tls)"
                    ),
                )
        if tls is not None:
            self.grpc_tls_port = self.grpc.tls_port
            ctx.grpc_endpoints["tls"] = f"{tls[0]}:{self.grpc.tls_port}"

    async def stop(self) -> None:
        if self.grpc is not None:
            await self.grpc.stop()
            self.grpc = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ctx.timer.stop()
        await self.ctx.pop.stop()
        await self.ctx.transactions.stop()
        if self.ctx.tracer is not None:
            await self.ctx.tracer.writer.stop()
        if self.users is not None:
            await self.users.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        await self.server.stop()
        self.ctx.cold_reads.close()
        self.admin.close()  # its connections to the controllers (topic commits)
        if self.ha is not None:
            await self.ha.stop()
        if self._loaded:  # never write an offsets table that was not read first
            self.ctx.offsets.persist()
        if self.ctx.timer.wheel is not None:
            await self.ctx.service.flush_now()  # what the timer's saved progress may cover
            self.ctx.timer.close()
        await self.ctx.service.stop()
        if self.tls is not None:
            use_tls(None)
        if self._serving:
            log.info("broker stopped", broker_name=self.cfg.broker_name)

    async def _housekeeping(self) -> None:
        """Persist consumer offsets, expire silent consumers, drop a demoted master's send
        state, keep the confirm offset current."""
        interval = self.cfg.consumer_offset_persist_interval_ms / 1000
        loop = asyncio.get_running_loop()
        next_persist = loop.time() + interval
        while True:
            await asyncio.sleep(min(1.0, interval))
            self.ctx.groups.expire(self.ctx.now_ms())
            self.ctx.sends.drop_unless_master()
            self._sample_stats()
            store = self.ctx.store
            if self.ha is None:
                store.confirm_offset = store.max_offset  # a lone master confirms what it stores
            if loop.time() >= next_persist:
                next_persist = loop.time() + interval
                try:  # the changed groups encoded on the loop in slices, written in a thread
                    await persist_offsets(self.ctx.offsets)
                except Exception as exc:
                    log.error(
                        "persisting consumer offsets failed", error=f"{type(exc).__name__}: {exc}"
                    )

    def _sample_stats(self) -> None:
        sample(self.ctx.stats, self.metrics.traffic, self.ctx.offsets.consumed, self.ctx.now_ms())

    async def _propose_sync_state_set(self, members: frozenset[int]) -> int:
        assert self.replicas is not None
        return await self.replicas.alter_sync_state_set(members)

    def _opened(self, conn: Connection) -> None:
        self.ctx.open_connections += 1
        self.metrics.connections.inc()

    def _closed(self, conn: Connection) -> None:
        self.ctx.open_connections -= 1
        self.metrics.connections.dec()
