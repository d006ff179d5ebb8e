"""The Telemetry stream of the gRPC endpoint: settings, and transaction check-backs to the
producers connected here.

Each client keeps one bidirectional Telemetry stream per endpoint. It writes its
:class:`Settings` there and waits for the server's answer before it starts (publishing: the
largest body and whether message types are checked; the backoff policy of its retries).

A producer's stream is also where the broker asks about a transaction the producer left open
(RecoverOrphanedTransactionCommand; the producer asks its checker and answers with
EndTransaction, source SOURCE_SERVER_CHECK). The hub does what an SDK TransactionProducer does
over remoting, on behalf of the producers streaming here: while one publishes topic T it
heart-beats producer group ``GRPC_TX_T`` (the group of T's gRPC transactions) to this broker and
to its group's master every :data:`HEARTBEAT_S`, so the master's check-back
(CHECK_TRANSACTION_STATE) reaches this hub, which pushes it to a live producer of the group.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from google.protobuf.duration_pb2 import Duration

from broker.grpc.delivery import SYSTEM_PROPERTIES, body_md5
from broker.grpc.produce import status
from broker.grpc.translate import Refused, no_namespace_in_settings, transaction_group
from daemon.tasks import cancel_and_wait, sleep_or_wake
from protocol.broker_requests.clients import Heartbeat
from protocol.broker_requests.transaction import CheckTransactionState
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.message import (
    PROP_KEYS,
    PROP_TAGS,
    MessageRecord,
    RecordError,
    decode_record,
    make_msg_id,
)
from protocol.remoting import Frame
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.timer import PROP_REAL_TOPIC, PROP_UNIQ_KEY
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = structlog.get_logger(__name__)

HEARTBEAT_S: Final = 3.0
"""Between two heartbeats of the transaction producer groups (the broker forgets a producer
after ``client_expiry_ms``, 10 s by default)."""

_HEARTBEAT_TIMEOUT_S: Final = 2.0


def half_message(record: MessageRecord) -> pb.Message:
    """A stored half message as the producer sent it, for a RecoverOrphanedTransactionCommand:
    its real topic, body (MD5 digest, as consumers get it), tag, keys, the producer's message
    id, born and store time and host, and the application's properties."""
    props = record.properties
    out = pb.Message(
        topic=pb.Resource(name=props.get(PROP_REAL_TOPIC, record.topic)), body=record.body
    )
    sysp = out.system_properties
    tags = props.get(PROP_TAGS)
    if tags:
        sysp.tag = tags
    sysp.keys.extend(props.get(PROP_KEYS, "").split())
    sysp.message_id = props.get(PROP_UNIQ_KEY) or record.msg_id
    sysp.body_digest.type = pb.MD5
    sysp.body_digest.checksum = body_md5(record.body)
    sysp.body_encoding = pb.IDENTITY
    sysp.message_type = pb.TRANSACTION
    group = props.get(PROP_MESSAGE_GROUP)
    if group:
        sysp.message_group = group
    sysp.born_timestamp.FromMilliseconds(record.born_timestamp)
    sysp.store_timestamp.FromMilliseconds(record.store_timestamp)
    sysp.born_host = record.born_host
    sysp.store_host = record.store_host
    sysp.queue_id = record.queue_id
    for name, value in props.items():
        if name not in SYSTEM_PROPERTIES:
            out.user_properties[name] = value
    return out


def client_id_of(context: Any) -> str:
    """The client's id from its ``x-mq-client-id`` header ("" when it sent none)."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return str(value)
    return ""


@dataclass(eq=False)
class _Session:
    """One client's Telemetry stream."""

    client_id: str
    out: asyncio.Queue[rpc.TelemetryCommand | None] = field(default_factory=asyncio.Queue)
    groups: frozenset[str] = frozenset()
    """The transaction producer groups of the topics it publishes."""
    check: Callable[[pb.Settings], None] | None = None
    """Raises :class:`Refused` for Settings its user may not write (None: no check)."""


class TelemetryHub:
    def __init__(
        self,
        pool: ConnectionPool,
        local_address: str,
        master_address: Callable[[], str],
        max_body_bytes: int,
    ) -> None:
        self.pool = pool
        self.local_address = local_address
        self.master_address = master_address
        self.max_body_bytes = max_body_bytes
        self.relay_id = f"grpc@{local_address}"
        """The client id this hub heart-beats producer groups with."""
        self._sessions: set[_Session] = set()
        self._turn = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._beat_now = asyncio.Event()
        self.on_subscription: (
            Callable[[pb.Settings, pb.Settings, str], Awaitable[pb.Status]] | None
        ) = None
        """Fills the answer to a consumer's settings (:mod:`broker.grpc.consume`): client
        settings, answer, client id -> the answer's status."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._heartbeat_loop(), name="grpc-telemetry-heartbeat")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None
        for session in self._sessions:
            session.out.put_nowait(None)

    # -- the stream ------------------------------------------------------------------------------
    async def stream(
        self,
        commands: AsyncIterator[rpc.TelemetryCommand],
        context: Any,
        check: Callable[[pb.Settings], None] | None = None,
    ) -> AsyncIterator[rpc.TelemetryCommand]:
        """The answers to one client's stream. ``check`` refuses Settings the client's user may
        not write: they are answered with the refusal and change nothing (a producer is not
        sent the check-backs of a topic it may not publish)."""
        session = _Session(client_id_of(context), check=check)
        self._sessions.add(session)
        reader = asyncio.create_task(self._read(commands, session))
        try:
            while (command := await session.out.get()) is not None:
                yield command
        finally:
            self._sessions.discard(session)
            reader.cancel()

    async def _read(self, commands: AsyncIterator[rpc.TelemetryCommand], session: _Session) -> None:
        try:
            async for command in commands:
                if command.HasField("settings"):
                    client = command.settings
                    try:
                        no_namespace_in_settings(client)
                        if session.check is not None:
                            session.check(client)
                    except Refused as exc:
                        refused = rpc.TelemetryCommand(status=status(exc.code, exc.message))
                        session.out.put_nowait(refused)
                        continue
                    if client.HasField("publishing"):
                        groups = frozenset(
                            transaction_group(t.name) for t in client.publishing.topics if t.name
                        )
                        if groups - session.groups:
                            self._beat_now.set()
                        session.groups = groups
                    answer, answered = self.settings(client), status(pb.OK)
                    if client.HasField("subscription") and self.on_subscription is not None:
                        answered = await self.on_subscription(client, answer, session.client_id)
                    session.out.put_nowait(rpc.TelemetryCommand(status=answered, settings=answer))
        except Exception as exc:  # the client went away mid-stream
            log.debug("telemetry stream ended", client_id=session.client_id, error=repr(exc))
        finally:
            session.out.put_nowait(None)

    def settings(self, client: pb.Settings) -> pb.Settings:
        """The server's answer to a client's settings: its own with the server's values."""
        out = pb.Settings()
        out.CopyFrom(client)
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=3,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=Duration(nanos=100_000_000), max=Duration(seconds=2), multiplier=2.0
                ),
            )
        )
        out.request_timeout.CopyFrom(Duration(seconds=3))
        if client.HasField("publishing"):
            out.publishing.max_body_size = self.max_body_bytes
            out.publishing.validate_message_type = True
        return out

    # -- transaction check-backs -----------------------------------------------------------------
    def _groups(self) -> set[str]:
        return {g for s in self._sessions for g in s.groups}

    async def _heartbeat_loop(self) -> None:
        while True:
            groups = self._groups()
            if groups:
                targets = {self.local_address, self.master_address()} - {""}
                await asyncio.gather(*(self._beat(a, groups) for a in sorted(targets)))
            self._beat_now.clear()
            await sleep_or_wake(self._beat_now, HEARTBEAT_S)

    async def _beat(self, address: str, groups: Iterable[str]) -> None:
        try:
            conn = await self.pool.get(address)
            if conn.on_request is None:
                conn.on_request = self._on_request
            for group in sorted(groups):
                beat = Heartbeat(
                    group=group, client_id=self.relay_id, producer=True, protocol="gRPC"
                )
                await conn.request(beat.code, *beat.encode(), _HEARTBEAT_TIMEOUT_S)
        except RemotingError as exc:
            self.pool.drop(address)
            log.debug("transaction producer heartbeat failed", address=address, error=str(exc))

    def _on_request(self, frame: Frame) -> None:
        if frame.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        try:
            check = CheckTransactionState.parse(frame.header, frame.body)
            group, offset = check.group, check.offset
            record = decode_record(check.half)
            message = half_message(record)
        except (FieldError, RecordError) as exc:
            log.warning("malformed transaction check-back ignored", error=str(exc))
            return
        live = sorted((s for s in self._sessions if group in s.groups), key=lambda s: s.client_id)
        if not live:
            log.info("transaction check-back: no gRPC producer of the group", producer_group=group)
            return
        session = live[next(self._turn) % len(live)]
        command = rpc.TelemetryCommand(
            recover_orphaned_transaction_command=rpc.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=make_msg_id(record.store_host, offset)
            )
        )
        session.out.put_nowait(command)
        log.info(
            "transaction check-back sent to a gRPC producer",
            producer_group=group,
            client_id=session.client_id,
            message_id=message.system_properties.message_id,
        )
