"""Message lookup: by message id, by unique key, by key, by queue offset (what ``rmqctl
queryMsgById``, ``queryMsgByUniqueKey``, ``queryMsgByKey`` and ``queryMsgByOffset`` use).

::

    async with Lookup("127.0.0.1:9878") as lookup:
        found = await lookup.by_key("orders", "order-1")
        msg = await lookup.by_id(found[0].msg_id)

A message has two ids. The offset id (``SendResult.msg_id``, ``Message ID`` in rmqctl) carries
the store host and CommitLog offset of the message (see :func:`protocol.message.parse_msg_id`):
:meth:`Lookup.by_id` asks that host, and when it does not answer (a dead master) every other
broker, whose replicated CommitLog holds the same record at the same offset. The unique key is
the id a client gave the message before sending it, stored as its ``UNIQ_KEY`` property: the id
the official RocketMQ clients show (34 hex digits from the RocketMQ 5 clients, 32 from the
classic ones, which look like an offset id). The key index holds it beside the message's keys,
per topic: :meth:`Lookup.by_unique_key` asks every broker group of the topic, or, without a
topic, every topic of every broker group; :meth:`Lookup.by_id` takes either form, as mqadmin's
queryMsgById falls back to the unique key. :meth:`Lookup.by_key` asks every broker group of the
topic (its master, else a slave) through the key index. Brokers answer committed messages only.
"""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from client.bootstrap import BootstrapClient, describe_failure
from client.errors import (
    BrokerError,
    ClientError,
    MalformedIdError,
    MessageNotFoundError,
    TopicNotFoundError,
)
from client.routes import ClusterBroker, TopicRoute, fetch_cluster_info, fetch_route
from protocol.broker_requests.admin import AllTopicsQuery, TopicTable
from protocol.broker_requests.query import END_OF_TIME, QueryMessage, ViewMessage
from protocol.codes import ResponseCode
from protocol.message import MessageRecord, RecordError, iter_records, parse_msg_id
from protocol.pull import PullFound, PullRequest, decode_pull_answer
from protocol.remoting import Frame, Header
from protocol.request_permissions import DLQ_PREFIX, RETRY_PREFIX
from protocol.timer import PROP_UNIQ_KEY
from remoting.errors import RemotingError, ResponseError

LOOKUP_GROUP: Final = "rmq_lookup"
"""The consumer group a queue-offset lookup pulls as (it commits nothing)."""

UNIQUE_KEYS_PER_GROUP: Final = 64
"""At most this many messages with one unique key per broker group and topic (a send retried
after a lost answer stores a message twice; more is not one message)."""

_HEX: Final = re.compile(r"[0-9A-Fa-f]{16,64}")
_INTERNAL_TOPIC_PREFIX: Final = "rmq_sys_"
"""The brokers' own topics (timer, POP, transactions): a search of every topic skips them."""
_SEARCH_CONCURRENCY: Final = 16

NOT_AN_ID: Final = (
    "not a message id: {id!r}: {problem} (an offset id is 32 hex digits: store host and "
    "offset; a unique key, the id a client gave the message as its UNIQ_KEY, 16 to 64)"
)


def id_problem(msg_id: str) -> str | None:
    """What keeps ``msg_id`` (stripped) from being a message id of either form, in a few
    words; None when it has one."""
    text = msg_id.strip()
    if offset_id_form(text) is not None or unique_key_form(text) is not None:
        return None
    if not text:
        return "it is empty"
    bad = "".join(dict.fromkeys(c for c in text if c not in string.hexdigits))
    if bad:
        return f"{bad!r} {'is not a hex digit' if len(bad) == 1 else 'are not hex digits'}"
    return f"it has {len(text)} hex digits"


def offset_id_form(msg_id: str) -> tuple[str, int] | None:
    """(store host, CommitLog offset) when ``msg_id`` has the offset id's form, else None (a
    negative offset is no offset id's: the classic clients' unique keys often read as one)."""
    try:
        host, offset = parse_msg_id(msg_id)
    except RecordError:
        return None
    return (host, offset) if offset >= 0 else None


def unique_key_form(msg_id: str) -> str | None:
    """``msg_id`` as the unique key the clients store (upper-case hex) when it has that form
    (hex, 16 to 64 digits: the RocketMQ 5 clients' 34, the classic clients' 32), else None."""
    return msg_id.upper() if _HEX.fullmatch(msg_id) else None


def _copies_last(m: FoundMessage) -> tuple[bool, int, str, int]:
    """Sort key: messages in their own topic before retry and dead-letter copies, then oldest
    first."""
    copy = m.record.topic.startswith((RETRY_PREFIX, DLQ_PREFIX))
    return (copy, m.record.store_timestamp, m.broker_name, m.record.physical_offset)


@dataclass(frozen=True, slots=True)
class FoundMessage:
    """A message a lookup found, and the broker that answered."""

    record: MessageRecord
    broker_name: str
    address: str

    @property
    def msg_id(self) -> str:
        return self.record.msg_id

    def to_dict(self, *, body: bool = False) -> dict[str, Any]:
        r = self.record
        doc: dict[str, Any] = {
            "msgId": r.msg_id,
            "topic": r.topic,
            "brokerName": self.broker_name,
            "queueId": r.queue_id,
            "queueOffset": r.queue_offset,
            "commitLogOffset": r.physical_offset,
            "keys": r.keys,
            "tags": r.tags,
            "bornTimestamp": r.born_timestamp,
            "bornHost": r.born_host,
            "storeTimestamp": r.store_timestamp,
            "storeHost": r.store_host,
            "bodySize": len(r.body),
            "properties": dict(r.properties),
        }
        if body:
            doc["body"] = r.body.decode("utf-8", errors="replace")
        return doc


def _records(body: bytes | None, address: str) -> list[MessageRecord]:
    try:
        return list(iter_records(body or b""))
    except RecordError as exc:
        raise ClientError(f"malformed message from {address}: {exc}") from None


class Lookup(BootstrapClient):
    """Message lookups through the bootstrap addresses (controllers, or a lone broker)."""

    async def _call(self, address: str, code: int, header: Header) -> Frame:
        conn = await self._pool.get(address)
        return await conn.call(code, header, None, self.timeout)

    # -- by id ---------------------------------------------------------------------------------

    async def by_id(self, msg_id: str, topic: str | None = None) -> FoundMessage:
        """The message with ``msg_id``, an offset id or a unique key (module doc): an offset id
        is looked up by its offset, then, not found there, as a unique key (a classic client's
        unique key has the offset id's form); a unique key through the key index, in ``topic``
        when given, else in every topic. Of several messages with one unique key, the first
        of :meth:`by_unique_key`. Raises :class:`MalformedIdError` for a malformed id and
        :class:`MessageNotFoundError` when no broker holds it (committed)."""
        text = msg_id.strip()
        problem = id_problem(text)
        if problem is not None:
            raise MalformedIdError(NOT_AN_ID.format(id=msg_id, problem=problem))
        located = offset_id_form(text)
        key = unique_key_form(text)
        reasons: list[str] = []
        unanswered: list[str] = []
        if located is not None:
            found = await self._by_offset_id(text.upper(), *located, reasons, unanswered)
            if found is not None:
                return found
        assert key is not None  # an offset id is hex too
        failures: list[str] = []
        try:
            matches = await self.by_unique_key(key, topic, errors=failures)
        except TopicNotFoundError as exc:
            reasons.append(f"as a unique key: {exc}")  # answered: no such topic to hold it
        except ClientError as exc:
            reasons.append(f"as a unique key: {exc}")
            unanswered.append(str(exc))
        else:
            if matches:
                return matches[0]
            where = f"in topic {topic}" if topic else "in any topic"
            reasons.append(f"no message has unique key {key} {where}")
            reasons.extend(failures)
            unanswered.extend(failures)
        why = "; ".join(dict.fromkeys(reasons))
        raise MessageNotFoundError(f"message {text.upper()} not found: {why}", unanswered)

    async def _by_offset_id(
        self, wanted: str, host: str, offset: int, reasons: list[str], unanswered: list[str]
    ) -> FoundMessage | None:
        """The record at ``offset`` on its store host, else on any registered broker (what
        they said goes to ``reasons``; what registered brokers that could not be asked said,
        also to ``unanswered``: a store host no longer registered counts as answered, its
        replicas were asked)."""
        host_failed: list[str] = []
        found = await self._view(host, "", offset, wanted, reasons, host_failed)
        if found is not None:
            return found
        # The store host may be gone (a failed master): its replicas hold the same record.
        try:
            clusters = await fetch_cluster_info(self.bootstrap)
        except ClientError as exc:
            reasons.append(str(exc))
            unanswered.append(str(exc))
            clusters = {}
        else:
            if not clusters:
                unanswered.append("no broker is registered to ask")
        registered = [b for bs in clusters.values() for b in bs]
        if any(b.address == host for b in registered):
            unanswered.extend(host_failed)
        others = [b for b in registered if b.address != host]
        others.sort(key=lambda b: (not b.is_master, b.broker_name, b.broker_id))
        for b in others:
            found = await self._view(b.address, b.broker_name, offset, wanted, reasons, unanswered)
            if found is not None:
                return found
        if not others and not reasons:
            reasons.append("no broker to ask")
        return None

    async def _view(
        self,
        address: str,
        name: str,
        offset: int,
        wanted: str,
        reasons: list[str],
        unanswered: list[str],
    ) -> FoundMessage | None:
        try:
            view = ViewMessage(offset=offset)
            frame = await self._call(address, view.code, view.encode()[0])
        except ResponseError as exc:
            reasons.append(exc.remark or str(exc))
            return None
        except RemotingError as exc:
            reasons.append(f"{address}: {describe_failure(exc)}")
            unanswered.append(reasons[-1])
            return None
        for record in _records(frame.body, address):
            if record.msg_id == wanted:
                return FoundMessage(record, name or await self._name_of(address), address)
        if name:
            reasons.append(f"{name} at {address} holds another message at offset {offset}")
        return None

    async def _name_of(self, address: str) -> str:
        try:
            clusters = await fetch_cluster_info(self.bootstrap)
        except ClientError:
            return ""
        for bs in clusters.values():
            for b in bs:
                if b.address == address:
                    return b.broker_name
        return ""

    # -- by unique key -------------------------------------------------------------------------

    async def by_unique_key(
        self, key: str, topic: str | None = None, *, errors: list[str] | None = None
    ) -> list[FoundMessage]:
        """The messages whose unique key (``UNIQ_KEY``) is ``key``, through the key index: in
        ``topic`` on every broker group of it, or without a topic in every topic of every
        broker group (the brokers' internal ``rmq_sys_`` topics aside); messages in their own
        topic first, then retry and dead-letter copies, oldest first. Raises
        :class:`ClientError` as :meth:`by_key` does; what groups that could not answer said
        is appended to ``errors`` (if given)."""
        key = key.strip()
        if not key:
            raise ClientError("the unique key must not be empty")
        if topic is not None:
            found = await self.by_key(topic, key, max_num=UNIQUE_KEYS_PER_GROUP, errors=errors)
        else:
            found = await self._everywhere(key, errors)
        found = [m for m in found if m.record.properties.get(PROP_UNIQ_KEY) == key]
        found.sort(key=_copies_last)
        return found

    async def _everywhere(self, key: str, errors: list[str] | None) -> list[FoundMessage]:
        groups: dict[str, list[ClusterBroker]] = {}
        for brokers in (await fetch_cluster_info(self.bootstrap)).values():
            for b in brokers:
                groups.setdefault(b.broker_name, []).append(b)
        if not groups:
            raise ClientError("no broker group to ask")
        limit = asyncio.Semaphore(_SEARCH_CONCURRENCY)
        answers = await asyncio.gather(
            *(self._search_group(name, members, key, limit) for name, members in groups.items())
        )
        return _found_or_failed(answers, errors)

    async def _search_group(
        self, name: str, members: list[ClusterBroker], key: str, limit: asyncio.Semaphore
    ) -> tuple[list[FoundMessage], str | None]:
        """Every topic one broker group holds, asked of its master, else a slave."""
        reasons: list[str] = []
        for b in sorted(members, key=lambda b: (not b.is_master, b.broker_id)):
            try:
                every = AllTopicsQuery()
                frame = await self._call(b.address, every.code, every.encode()[0])
                topics = TopicTable.parse(frame.header, frame.body).queues
            except ResponseError as exc:
                reasons.append(f"{b.address}: {BrokerError(exc.code, exc.remark)}")
                continue
            except RemotingError as exc:
                reasons.append(f"{b.address}: {describe_failure(exc)}")
                continue
            except ValueError as exc:
                reasons.append(f"{b.address}: malformed topic list: {exc}")
                continue
            names = sorted(t for t in topics if not t.startswith(_INTERNAL_TOPIC_PREFIX))

            async def one(topic: str, address: str = b.address) -> list[FoundMessage] | str:
                query = QueryMessage(topic=topic, key=key, max_num=UNIQUE_KEYS_PER_GROUP)
                async with limit:
                    try:
                        answer = await self._call(address, query.code, query.encode()[0])
                    except ResponseError as exc:
                        if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                            return []
                        return f"{address}: {exc.remark or BrokerError(exc.code, exc.remark)}"
                    except RemotingError as exc:
                        return f"{address}: {describe_failure(exc)}"
                return [FoundMessage(r, name, address) for r in _records(answer.body, address)]

            results = await asyncio.gather(*(one(t) for t in names))
            found = [m for r in results if not isinstance(r, str) for m in r]
            failed = list(dict.fromkeys(r for r in results if isinstance(r, str)))
            return found, f"broker group {name}: {'; '.join(failed)}" if failed else None
        return [], f"broker group {name} did not answer ({'; '.join(reasons)})"

    # -- by key --------------------------------------------------------------------------------

    async def by_key(
        self,
        topic: str,
        key: str,
        *,
        begin_ms: int | None = None,
        end_ms: int | None = None,
        max_num: int = 64,
        errors: list[str] | None = None,
    ) -> list[FoundMessage]:
        """The messages of ``topic`` with ``key`` (one of their keys, or their UNIQ_KEY) stored
        in ``[begin_ms, end_ms]`` (default: any time), from every broker group of the topic,
        oldest first; at most ``max_num`` per group. Raises :class:`ClientError` for an unknown
        topic, a bad range, or when nothing was found and a group could not answer (e.g. no
        index covers the range); when something was found, what the groups that could not
        answer said is appended to ``errors`` (if given)."""
        if not key:
            raise ClientError("the key must not be empty")
        if begin_ms is not None and end_ms is not None and begin_ms > end_ms:
            raise ClientError(f"the range begins ({begin_ms}) after it ends ({end_ms})")
        route = await fetch_route(self.bootstrap, topic)
        query = QueryMessage(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_ms=0 if begin_ms is None else begin_ms,
            end_ms=END_OF_TIME if end_ms is None else end_ms,
        )
        groups = [b.broker_name for b in route.brokers]
        answers = await asyncio.gather(*(self._query_group(route, g, query) for g in groups))
        found = _found_or_failed(answers, errors)
        found.sort(
            key=lambda m: (m.record.store_timestamp, m.broker_name, m.record.physical_offset)
        )
        return found

    async def _query_group(
        self, route: TopicRoute, group: str, query: QueryMessage
    ) -> tuple[list[FoundMessage], str | None]:
        """One group's answer: its master's, else the first slave's that answers."""
        brokers = {b.broker_name: b for b in route.brokers}
        b = brokers[group]
        addresses = [a for a in (b.master_address, *b.slaves) if a]
        reasons: list[str] = []
        for address in addresses:
            try:
                frame = await self._call(address, query.code, query.encode()[0])
            except ResponseError as exc:
                if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                    return [], None  # the topic has no queue in this group
                if exc.code in (ResponseCode.QUERY_NOT_FOUND, ResponseCode.BAD_REQUEST):
                    return [], exc.remark or str(BrokerError(exc.code, exc.remark, address))
                reasons.append(f"{address}: {BrokerError(exc.code, exc.remark)}")
                continue
            except RemotingError as exc:
                reasons.append(f"{address}: {describe_failure(exc)}")
                continue
            return [FoundMessage(r, group, address) for r in _records(frame.body, address)], None
        if not addresses:
            return [], f"broker group {group} has no broker to ask"
        return [], f"broker group {group} did not answer ({'; '.join(reasons)})"

    # -- by queue offset -----------------------------------------------------------------------

    async def by_offset(
        self, topic: str, broker_name: str, queue_id: int, offset: int
    ) -> FoundMessage:
        """The message at ``offset`` of queue ``queue_id`` of ``topic`` on ``broker_name`` (read
        from its master, else a slave: committed messages only)."""
        if queue_id < 0 or offset < 0:
            raise ClientError("the queue id and offset must be >= 0")
        route = await fetch_route(self.bootstrap, topic)
        names = [b.broker_name for b in route.brokers]
        group = next((b for b in route.brokers if b.broker_name == broker_name), None)
        if group is None:
            raise ClientError(
                f"topic {topic!r} has no queues on broker group {broker_name!r} "
                f"(it has: {', '.join(names) or 'none'})"
            )
        if queue_id >= group.queues:
            raise ClientError(
                f"queue {queue_id} out of range: {topic!r} has {group.queues} queues on "
                f"{broker_name}"
            )
        pull = PullRequest(
            group=LOOKUP_GROUP, topic=topic, queue_id=queue_id, offset=offset, max_count=1
        )
        reasons: list[str] = []
        for address in [a for a in (group.master_address, *group.slaves) if a]:
            try:
                conn = await self._pool.get(address)
                frame = await conn.request(pull.code, pull.header(), None, self.timeout)
            except RemotingError as exc:
                reasons.append(f"{address}: {describe_failure(exc)}")
                continue
            try:
                answer = decode_pull_answer(frame)
            except ValueError as exc:
                raise ClientError(f"malformed pull answer from {address}: {exc}") from None
            if isinstance(answer, PullFound):
                records = _records(answer.body, address)
                if records and records[0].queue_offset == offset:
                    return FoundMessage(records[0], broker_name, address)
            detail = f": {frame.remark}" if frame.remark else ""
            raise ClientError(
                f"no committed message at offset {offset} of {topic}:{queue_id} on "
                f"{broker_name}{detail}"
            )
        raise ClientError(f"broker group {broker_name} did not answer ({'; '.join(reasons)})")


def _found_or_failed(
    answers: Sequence[tuple[list[FoundMessage], str | None]], errors: list[str] | None
) -> list[FoundMessage]:
    """The messages the broker groups answered (``(messages, error)`` each); a
    :class:`ClientError` naming every group's error when none was found and some could not
    answer, else their errors appended to ``errors`` (if given)."""
    found = [m for messages, _ in answers for m in messages]
    failures = [error for _, error in answers if error is not None]
    if not found and failures:
        raise ClientError("; ".join(failures))
    if errors is not None:
        errors.extend(failures)
    return found
