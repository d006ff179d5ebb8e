"""Transactional messages in the SDK (docs/transactions.md).

::

    def checker(check: TransactionCheck) -> TransactionStatus:
        return TransactionStatus.COMMIT if order_saved(check.keys) else TransactionStatus.ROLLBACK

    async with TransactionProducer(bootstrap, "orders-tx", checker, topics=["orders"]) as tp:
        txn = await tp.send_transaction("orders", b"...", keys="order-1")
        save_order()               # the local transaction
        await txn.commit()         # or txn.rollback()

``send_transaction`` stores a half message that no consumer sees; ``commit`` makes it visible
exactly once, ``rollback`` drops it. A transaction left open (the producer crashed, the commit
was lost) is checked back with a live producer of the same producer group: the broker pushes
CHECK_TRANSACTION_STATE over the connection the producer heart-beats on, the producer asks its
``checker`` and answers with END_TRANSACTION. A new producer instance of the group answers for
halves a crashed one left, so give it the topics whose broker groups it should listen to.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from client import logs
from client.errors import BrokerError, ClientError, ClosedError, NoRouteError, SendError
from client.identity import heartbeat
from client.message import SendResult
from client.producer import RETRIABLE_CODES, Producer
from protocol.broker_requests.transaction import (
    CheckTransactionState,
    EndTransaction,
    TransactionEnded,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError
from protocol.message import RecordError, decode_record, parse_msg_id
from protocol.remoting import Frame, Scalar
from protocol.transaction import (
    COMMIT_TYPE,
    HALF_TOPIC,
    NOT_TYPE,
    PROP_PRODUCER_GROUP,
    PROP_REAL_TOPIC,
    PROP_TRANSACTION_ID,
    PROP_TRANSACTION_PREPARED,
    ROLLBACK_TYPE,
)
from remoting.client import ConnectionPool, RemotingClient
from remoting.errors import RemotingError

__all__ = ["Transaction", "TransactionCheck", "TransactionProducer", "TransactionStatus"]

log = logs.get_logger(__name__)


class TransactionStatus(enum.Enum):
    COMMIT = COMMIT_TYPE
    ROLLBACK = ROLLBACK_TYPE
    UNKNOWN = NOT_TYPE
    """Not decided yet: the broker checks back again later (up to its maximum of checks)."""


@dataclass(frozen=True, slots=True)
class TransactionCheck:
    """An open transaction the broker asks about: its message as sent."""

    transaction_id: str
    topic: str
    body: bytes
    keys: str
    tags: str
    properties: dict[str, str]
    broker_name: str
    half_offset: int


Checker = Callable[[TransactionCheck], TransactionStatus | Awaitable[TransactionStatus]]


class Transaction:
    """A sent half message: :meth:`commit` or :meth:`rollback` it (each may be repeated: a
    repeat of what resolved it answers at once, the opposite raises :class:`BrokerError`
    TRANSACTION_ALREADY_RESOLVED)."""

    def __init__(
        self, owner: TransactionProducer, topic: str, transaction_id: str, half: SendResult
    ) -> None:
        self.owner = owner
        self.topic = topic
        self.transaction_id = transaction_id
        self.half = half
        self.half_offset = parse_msg_id(half.msg_id)[1]

    async def commit(self) -> bool:
        """Make the message visible (exactly once). Returns True when this call committed it,
        False when it was committed already (a repeat, or a check-back answered first)."""
        return await self.owner.end(self, TransactionStatus.COMMIT)

    async def rollback(self) -> bool:
        """Drop the message; True when this call rolled it back, False when it was already."""
        return await self.owner.end(self, TransactionStatus.ROLLBACK)


class TransactionProducer:
    """A producer of transactional messages for one producer ``group``.

    - ``checker``: answers the broker's check-backs of open transactions of the group (a
      function or coroutine function; an exception counts as UNKNOWN).
    - ``topics``: topics whose broker groups this producer registers with at start (the ones
      it sends to are added), so it answers check-backs for halves another instance left.
    - ``heartbeat_interval``: seconds between heartbeats to every broker of those topics.
    - ``end_deadline``: seconds a commit or rollback is retried through failovers.
    - the other keywords go to the :class:`Producer` that sends the halves (auto-batching is
      off: a half message is sent alone).
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        group: str,
        checker: Checker,
        *,
        topics: Iterable[str] = (),
        heartbeat_interval: float = 1.0,
        end_deadline: float = 10.0,
        request_timeout: float = 3.0,
        **producer_options: Any,
    ) -> None:
        if not group:
            raise ValueError("a transactional producer needs a producer group")
        self.group = group
        self.checker = checker
        self.heartbeat_interval = heartbeat_interval
        self.end_deadline = end_deadline
        self.request_timeout = request_timeout
        producer_options["auto_batch"] = False
        self.producer = Producer(
            bootstrap if isinstance(bootstrap, str) else list(bootstrap), **producer_options
        )
        self.client_id = f"{group}@{uuid.uuid4().hex[:12]}"
        self._topics: set[str] = set(topics)
        self._pool = ConnectionPool(
            producer_options.get("connect_timeout", 3.0),
            producer_options.get("credentials"),
            producer_options.get("tls"),
        )
        self._task: asyncio.Task[None] | None = None
        self._checks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.checks_answered = 0

    async def start(self) -> None:
        await self.producer.start()
        await self._heartbeat_all()
        self._task = asyncio.create_task(self._heartbeat_loop(), name="transaction-heartbeat")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for task in list(self._checks):
            task.cancel()
        await asyncio.gather(*self._checks, return_exceptions=True)
        self._pool.close()
        await self.producer.close()

    async def __aenter__(self) -> TransactionProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- sending ---------------------------------------------------------------------------------
    async def send_transaction(
        self,
        topic: str,
        body: bytes,
        keys: str = "",
        tags: str = "",
        properties: Mapping[str, str] | None = None,
        *,
        transaction_id: str | None = None,
    ) -> Transaction:
        """Store a half message for ``topic`` (acknowledged like a send, invisible to
        consumers); resolve it with the returned :class:`Transaction`."""
        if self._closed:
            raise ClosedError("transactional producer is closed")
        txn_id = transaction_id or uuid.uuid4().hex
        props = {
            **(properties or {}),
            PROP_TRANSACTION_PREPARED: "true",
            PROP_PRODUCER_GROUP: self.group,
            PROP_TRANSACTION_ID: txn_id,
        }
        if topic not in self._topics:
            self._topics.add(topic)
            await self._heartbeat_all()
        result = await self.producer.send(topic, body, keys, tags, props)
        return Transaction(self, topic, txn_id, result)

    async def end(self, txn: Transaction, status: TransactionStatus) -> bool:
        """END_TRANSACTION at the current master of the half's broker group, retried through
        a failover until ``end_deadline``. True when this call resolved it."""
        if self._closed:
            raise ClosedError("transactional producer is closed")
        ask = EndTransaction(
            group=self.group,
            transaction_id=txn.transaction_id,
            offset=txn.half_offset,
            commit_or_rollback=status.value,
        )
        header, _ = ask.encode()
        deadline = time.monotonic() + self.end_deadline
        routes = self.producer.routes
        last: Exception | None = None
        fresh = False
        broker = txn.half.broker_name
        while time.monotonic() < deadline:
            try:
                route = await (routes.refresh(txn.topic) if fresh else routes.get(txn.topic))
                address = route.master_address(broker)
                if address is None:
                    raise NoRouteError(f"broker group {broker} has no master")
                conn = await self._conn(address)
                timeout = max(min(self.request_timeout, deadline - time.monotonic()), 0.001)
                resp = await conn.request(ask.code, header, None, timeout)
            except (ClientError, RemotingError) as exc:
                if isinstance(exc, BrokerError) and exc.code not in RETRIABLE_CODES:
                    raise
                last = exc
            else:
                if resp.code == ResponseCode.SUCCESS:
                    try:
                        return not TransactionEnded.parse(resp.header, resp.body).already
                    except FieldError as exc:
                        raise ClientError(
                            f"malformed END_TRANSACTION answer from {address}: {exc}"
                        ) from None
                error = BrokerError.of(resp, address)
                if resp.code not in RETRIABLE_CODES:
                    raise error
                last = error
            fresh = True
            await asyncio.sleep(min(0.2, max(deadline - time.monotonic(), 0)))
        raise SendError(
            f"{status.name.lower()} of transaction {txn.transaction_id} failed until the "
            f"deadline: {last}"
        )

    # -- heartbeats and check-backs ------------------------------------------------------------
    async def _conn(self, address: str) -> RemotingClient:
        conn = await self._pool.get(address)
        if conn.on_request is None:
            conn.on_request = lambda frame, c=conn: self._on_request(c, frame)
        return conn

    async def _heartbeat_loop(self) -> None:
        failed = False
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            # The cached routes list every replica (a promoted slave heard us already); look
            # them up again only after a heartbeat failed.
            failed = not await self._heartbeat_all(fresh=failed)

    async def _heartbeat_all(self, fresh: bool = False) -> bool:
        """Heartbeat to every broker of the topics' routes; False when one failed."""
        addresses: set[str] = set()
        ok = True
        for topic in sorted(self._topics):
            try:
                routes = self.producer.routes
                route = await (routes.refresh(topic) if fresh else routes.get(topic))
            except (ClientError, RemotingError) as exc:
                log.debug("transaction heartbeat: no route", topic=topic, error=str(exc))
                ok = False
                continue
            for b in route.brokers:
                if b.master_address:
                    addresses.add(b.master_address)
                addresses.update(b.slaves)
        beat = heartbeat(self.group, self.client_id, producer=True)
        beats = await asyncio.gather(*(self._beat(a, beat) for a in sorted(addresses)))
        return ok and all(beats)

    async def _beat(self, address: str, beat: dict[str, Scalar]) -> bool:
        try:
            conn = await self._conn(address)
            resp = await conn.request(RequestCode.HEART_BEAT, beat, None, self.request_timeout)
        except (ClientError, RemotingError) as exc:
            log.debug("transaction heartbeat failed", address=address, error=str(exc))
            return False
        return resp.code == ResponseCode.SUCCESS

    def _on_request(self, conn: RemotingClient, frame: Frame) -> None:
        if frame.code != CheckTransactionState.code or self._closed:
            return
        task = asyncio.ensure_future(self._answer_check(conn, frame))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _answer_check(self, conn: RemotingClient, frame: Frame) -> None:
        try:
            asked = CheckTransactionState.parse(frame.header, frame.body)
            record = decode_record(asked.half)
            props = record.properties
            offset = asked.offset
            txn_id = props.get(PROP_TRANSACTION_ID, "")
            if not txn_id or asked.group != self.group:
                raise RecordError("check-back without transaction id or not of our group")
        except (FieldError, RecordError) as exc:
            log.warning("malformed transaction check ignored", error=str(exc))
            return
        check = TransactionCheck(
            transaction_id=txn_id,
            topic=props.get(PROP_REAL_TOPIC, HALF_TOPIC),
            body=record.body,
            keys=record.keys,
            tags=record.tags,
            properties=props,
            broker_name=asked.broker_name,
            half_offset=offset,
        )
        try:
            answer = self.checker(check)
            if inspect.isawaitable(answer):
                answer = await answer
            status = TransactionStatus(answer)
        except Exception as exc:
            log.warning("transaction checker failed", transaction_id=txn_id, error=repr(exc))
            status = TransactionStatus.UNKNOWN
        ask = EndTransaction(
            group=self.group,
            transaction_id=txn_id,
            offset=offset,
            commit_or_rollback=status.value,
            from_check=True,
        )
        try:
            resp = await conn.request(ask.code, *ask.encode(), self.request_timeout)
        except (ClientError, RemotingError) as exc:
            log.warning("transaction check answer failed", transaction_id=txn_id, error=str(exc))
            return
        self.checks_answered += 1
        if resp.code != ResponseCode.SUCCESS:
            log.warning(
                "transaction check answer refused",
                transaction_id=txn_id,
                code=resp.code,
                remark=resp.remark,
            )
