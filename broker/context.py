"""What request processors share: config, store, topics, offsets, groups, waiters, metrics.

Role-dependent rules (may this broker take writes, how far may consumers read, must a send wait
for replicas) are answered here so processors stay the same in every mode. The POP, timer and
transaction services are built beside it by the composition root (:mod:`broker.compose`), each
given only the parts of it that it uses (a narrow Protocol of its own); this module imports none
of them but for types.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.appender import Appender
from broker.broker_stats import BrokerStats
from broker.cold_reads import ColdReads
from broker.config import BrokerConfig
from broker.consumer_groups import ConsumerGroups
from broker.deletions import Deletions
from broker.durable import SUCCESS, BothDone, DurableDone, flush_timeout, slave_timeout
from broker.ha.service import HAService
from broker.long_polling import PullWaiters
from broker.message_service import MessageStoreService
from broker.metrics import BrokerMetrics
from broker.offset_resets import PendingResets
from broker.producer_groups import ProducerGroups
from broker.role import RoleCell, RoleState
from broker.sealed_queues import SealedQueues
from broker.send.service import SendRefused
from broker.write_gate import WriteGate
from daemon.auth_key import load_auth_key
from protocol.codes import ResponseCode
from protocol.request_auth import Credentials, cluster_credentials
from protocol.topic_attrs import TopicAttrs
from storage.config_files import (
    ConsumerOffsetStore,
    DlqResendLedger,
    SubscriptionGroupStore,
    TopicConfig,
    TopicConfigStore,
)
from storage.store import MessageStore, PutResult

if TYPE_CHECKING:
    from broker.dlq.service import DeadLetterService
    from broker.pop.service import PopService
    from broker.pull.service import PullService
    from broker.send.service import SendService
    from broker.timer.service import TimerService
    from broker.trace.observer import BrokerTracer
    from broker.transaction.service import TransactionService


class BrokerContext:
    timer: TimerService
    """Scheduled delivery (broker.timer): ``put_at`` appends a message due later. Built beside
    this context by the composition root (:func:`broker.compose.compose`)."""
    pop: PopService
    """POP consumption (broker.pop): the in-flight set and its revive log."""
    transactions: TransactionService
    """Transactional messages (broker.transaction): open halves, commits, check-backs."""
    sends: SendService
    """The send path of every front (broker.send): admission, storing, the send figures."""
    pulls: PullService
    """The pull path of every front (broker.pull): limits, filter, offsets, long polling."""
    dead_letters: DeadLetterService
    """Consumer groups' dead-letter queues (broker.dlq): listed and re-sent."""

    def __init__(self, cfg: BrokerConfig, metrics: BrokerMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.auth_key = load_auth_key(cfg.auth_key_file) if cfg.auth_key_file else None
        self.cluster_credentials: Credentials | None = None
        """With auth_enabled: what this broker's own requests (to the controllers, a slave's to
        its master) sign with; None: they go unsigned."""
        if cfg.auth_enabled and self.auth_key is not None:
            self.cluster_credentials = cluster_credentials(self.auth_key)
        self.service = MessageStoreService(cfg, metrics)
        self.topics = TopicConfigStore(cfg.data_dir)
        self.offsets = ConsumerOffsetStore(cfg.data_dir)
        self.sub_groups = SubscriptionGroupStore(cfg.data_dir)
        """Consumer groups' retry settings (persisted; a slave copies its master's)."""
        self.dlq_resent = DlqResendLedger(cfg.data_dir)
        self.groups = ConsumerGroups(cfg.client_expiry_ms)
        self.waiters = PullWaiters()
        self.offset_resets = PendingResets(lambda: self.role.master_epoch)
        """Offsets reset for groups' next reads (:mod:`broker.offset_resets`), in this master's
        epoch."""
        self.appender = Appender(self.service.store, self.waiters, metrics, self.topics)
        """Every write to the CommitLog goes through it (broker.appender)."""
        self.controller_mode = bool(cfg.controller_addresses)
        # In controller mode the broker takes no writes until the controller names it master.
        # The ReplicasManager is the role's one writer (broker.role).
        self.role_cell = RoleCell(
            RoleState(
                is_master=not self.controller_mode,
                master_address="" if self.controller_mode else cfg.listen,
            )
        )
        self.gate = WriteGate(
            self.role_cell,
            listen=cfg.listen,
            broker_name=cfg.broker_name,
            controller_mode=self.controller_mode,
            min_in_sync_replicas=cfg.min_in_sync_replicas,
        )
        """Whether a write may be taken now (:mod:`broker.write_gate`)."""
        self.topic_listeners: list[Callable[[], None]] = []
        self.deletions = Deletions()
        """Topics and groups deleted here (deleteTopic, deleteSubGroup): a slave's copy of
        its master's tables skips names deleted while the copy was on its way."""
        self.ha: HAService | None = None
        self._queue_counters: dict[str, itertools.count[int]] = {}
        self.sealed = SealedQueues()
        """Static topic queues sealed or being sealed here: sends to them are refused."""
        self.grpc_endpoints: dict[str, str] = {}
        """Where this broker serves the gRPC protocol: ``plain`` and ``tls`` -> host:port (set
        once they listen; GET_BROKER_RUNTIME_INFO tells other brokers' gRPC endpoints)."""
        self.tracer: BrokerTracer | None = None
        """With trace_enabled: the broker's message trace (:mod:`broker.trace`)."""
        self.cold_reads = ColdReads(lambda: cfg.cold_read_bytes_per_s)
        """Pulls' and POPs' reads of records not in the page cache, off the loop at
        ``cold_read_bytes_per_s`` (:mod:`broker.cold_reads`)."""
        self.cold_reads.export_metrics(metrics)
        self.stats = BrokerStats()
        self.producers = ProducerGroups()
        """Producer groups' live clients (producerConnection)."""
        """Recent rates per topic and group (brokerStatus, statsAll), sampled by the broker."""
        self._sync_flush = cfg.flush == "sync"
        self._all_ack = self.controller_mode and cfg.all_ack_in_sync_state_set

    def attach_ha(self, ha: HAService) -> None:
        """Controller mode: replication (set once, before the broker serves)."""
        self.ha = ha
        self.appender.ha = ha
        self.gate.replicas = ha

    @property
    def role(self) -> RoleState:
        """The current role (a frozen value: read its fields from one ``role`` read)."""
        return self.role_cell.current

    @property
    def store(self) -> MessageStore:
        return self.service.store

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    # -- writes --------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raises :class:`~broker.write_gate.WriteRefused` when this broker may not take a write
        now (:meth:`broker.write_gate.WriteGate.check_writable`)."""
        self.gate.check_writable()

    def create_topic(self, topic: str, queues: int, attrs: TopicAttrs | None = None) -> TopicConfig:
        """Create or change ``topic`` (``attrs`` None: keep its permission and type)."""
        tc = self.topics.update(topic, queues, attrs)
        for listener in self.topic_listeners:
            listener()
        return tc

    def create_topic_on_send(self, topic: str, queues: int) -> TopicConfig:
        """``auto_create_topic``'s creation by a send: refused with TOPIC_NOT_EXIST for the
        name of a topic deleted here (deleteTopic), which only updateTopic creates again."""
        if self.store.was_retired(topic):
            raise SendRefused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {topic} does not exist (it was deleted; updateTopic creates it again)",
            )
        return self.create_topic(topic, queues)

    def ensure_system_topic(self, topic: str) -> TopicConfig:
        """A group's retry or DLQ topic, created with one queue (RocketMQ's default) when
        missing."""
        tc = self.topics.get(topic)
        return tc if tc is not None else self.create_topic(topic, 1)

    def adopt_store_topics(self) -> list[str]:
        """Give every topic that has messages in the store a topic config (a new master whose
        copy of the config lags the replicated data must still serve it). Returns the topics
        added."""
        added = []
        for topic in self.store.topics():
            if self.topics.get(topic) is None:
                queue_ids = self.store.queue_ids(topic)
                if queue_ids:
                    self.create_topic(topic, max(queue_ids) + 1)
                    added.append(topic)
        return added

    def next_queue(self, topic: str, queues: int) -> int:
        counter = self._queue_counters.get(topic)
        if counter is None:
            counter = self._queue_counters[topic] = itertools.count()
        return next(counter) % queues

    def needs_wait(self, result: PutResult) -> bool:
        if self._sync_flush and result.end_offset > self.service.flushed_offset:
            return True
        return self._all_ack and self.ha is not None and result.end_offset > self.ha.confirm_offset

    def when_durable(self, result: PutResult, done: DurableDone) -> None:
        """Call ``done(code, remark)`` once what the ack settings require holds: (SUCCESS, "")
        or an error code and remark. A flush and the replicas are waited for together (the
        answer comes when both are done; a flush timeout is reported before a replica one).
        ``done`` may run before this returns."""
        end = result.end_offset
        flush = self._sync_flush
        replicas = self._all_ack and self.ha is not None
        if flush and replicas:
            both = BothDone(self.cfg, done)
            self.service.when_flushed(end, self.cfg.sync_flush_timeout_ms / 1000, both.flushed)
            self._when_replicated(end, both.replicated)
        elif flush:
            self.service.when_flushed(
                end,
                self.cfg.sync_flush_timeout_ms / 1000,
                lambda ok: done(*(SUCCESS if ok else flush_timeout(self.cfg))),
            )
        elif replicas:
            self._when_replicated(
                end, lambda ok: done(*(SUCCESS if ok else slave_timeout(self.cfg)))
            )
        else:
            done(*SUCCESS)

    def _when_replicated(self, end_offset: int, fn: Callable[[bool], None]) -> None:
        assert self.ha is not None
        self.ha.when_replicated(end_offset, self.cfg.slave_ack_timeout_ms / 1000, fn)

    # -- reads ---------------------------------------------------------------------------------
    def visible_offset(self) -> int | None:
        """CommitLog offset up to which consumers may read; None: everything stored.

        In controller mode consumers see only what every SyncStateSet member has (the confirm
        offset), on master and slave alike, so nothing a consumer saw is ever truncated away."""
        if self.ha is not None:
            return self.ha.confirm_offset
        return None

    # -- figures -------------------------------------------------------------------------------
    def connections(self) -> int:
        return self.open_connections

    open_connections: int = 0
