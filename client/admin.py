"""Administrative requests (what rmqctl's topic, cluster and consumer group commands use)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

from client.bootstrap import BootstrapClient, describe_failure
from client.errors import BrokerError, ClientError, GroupNotFoundError, MessageNotFoundError
from client.routes import ClusterBroker, TopicRoute, fetch_cluster_info, fetch_route
from protocol.broker_requests.admin import CreateTopic
from protocol.broker_requests.consumer_stats import ConsumerConnectionsQuery, ConsumeStatsQuery
from protocol.broker_requests.dlq import DlqQuery, DlqResend
from protocol.broker_requests.subscription_groups import (
    SubscriptionGroupQuery,
    SubscriptionGroupUpdate,
)
from protocol.codes import ResponseCode
from protocol.consume_stats import ConsumeStats, StatsError, decode_connections
from protocol.remoting import Frame, Scalar
from protocol.retry import RetryConfigError, config_from_dict, dlq_topic, retry_topic
from remoting.errors import RemotingError, ResponseError


class Admin(BootstrapClient):
    """Topic and cluster administration through the bootstrap addresses."""

    async def topic_route(self, topic: str) -> TopicRoute:
        return await fetch_route(self.bootstrap, topic)

    async def cluster_info(self) -> dict[str, list[ClusterBroker]]:
        return await fetch_cluster_info(self.bootstrap)

    async def create_topic(
        self,
        topic: str,
        queues: int = 8,
        cluster: str | None = None,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> list[str]:
        """Create or update ``topic`` with ``queues`` queues on every master of ``cluster``
        (of every cluster when None), with permission ``perm`` and ``message_type`` (None:
        keep the topic's; a new topic's are 6 and NORMAL); returns the broker names, sorted."""
        clusters = await self.cluster_info()
        if cluster is not None:
            if cluster not in clusters:
                known = ", ".join(sorted(clusters)) or "none"
                raise ClientError(f"cluster {cluster!r} not found (known: {known})")
            clusters = {cluster: clusters[cluster]}
        masters = {b.broker_name: b.address for bs in clusters.values() for b in bs if b.is_master}
        if not masters:
            raise ClientError("no master broker found to create the topic on")
        create = CreateTopic(topic=topic, queues=queues, perm=perm, message_type=message_type)
        header, _ = create.encode()

        async def one(name: str, address: str) -> str | None:
            try:
                conn = await self._pool.get(address)
                await conn.call(create.code, header, None, self.timeout)
            except ResponseError as exc:
                return f"{name} ({address}): {BrokerError(exc.code, exc.remark)}"
            except RemotingError as exc:
                return f"{name} ({address}): {describe_failure(exc)}"
            return None

        names = sorted(masters)
        failures = await asyncio.gather(*(one(n, masters[n]) for n in names))
        errors = [f for f in failures if f is not None]
        if errors:
            raise ClientError(f"creating topic {topic!r} failed on {'; '.join(errors)}")
        return names

    # -- consumer groups: retry settings and dead-letter queues ---------------------------------
    async def _brokers(self, broker_name: str | None, *, reads: bool = False) -> dict[str, str]:
        """broker name -> address of its master (``reads``: or of a slave while it has none),
        for every broker group, or only ``broker_name``."""
        clusters = await self.cluster_info()
        masters: dict[str, str] = {}
        slaves: dict[str, str] = {}
        for brokers in clusters.values():
            for b in brokers:
                if broker_name is not None and b.broker_name != broker_name:
                    continue
                if b.is_master:
                    masters[b.broker_name] = b.address
                else:
                    slaves.setdefault(b.broker_name, b.address)
        found = {**slaves, **masters} if reads else masters
        if broker_name is not None and broker_name not in found:
            raise ClientError(f"broker group {broker_name!r} has no master (or is unknown)")
        if not found:
            raise ClientError("no master broker found")
        return found

    async def _each(
        self,
        targets: dict[str, str],
        code: int,
        header: dict[str, Scalar],
        body: bytes | None = None,
    ) -> dict[str, Frame | BrokerError | str]:
        """Send one request to every target; broker name -> answer, refusal or failure text."""

        async def one(name: str, address: str) -> Frame | BrokerError | str:
            try:
                conn = await self._pool.get(address)
                return await conn.call(code, header, body, self.timeout)
            except ResponseError as exc:
                return BrokerError(exc.code, exc.remark, address)
            except RemotingError as exc:
                return f"{name} ({address}): {describe_failure(exc)}"

        names = sorted(targets)
        answers = await asyncio.gather(*(one(n, targets[n]) for n in names))
        return dict(zip(names, answers, strict=True))

    async def update_sub_group(
        self, settings: dict[str, Any], broker_name: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Create or update a consumer group's retry settings (the keys of
        :data:`protocol.retry.FIELDS`, ``groupName`` required; keys left out keep their value)
        on the master of every broker group, or of ``broker_name``. Returns broker name ->
        the settings now stored there."""
        try:
            config_from_dict(settings)  # the brokers check again; fail before sending
        except RetryConfigError as exc:
            raise ClientError(str(exc)) from None
        masters = await self._brokers(broker_name)
        update = SubscriptionGroupUpdate(settings=settings)
        answers = await self._each(masters, update.code, *update.encode())
        return _bodies(answers, f"updating subscription group {settings.get('groupName')!r}")

    async def get_sub_group(
        self, group: str, broker_name: str | None = None
    ) -> dict[str, dict[str, Any] | None]:
        """A group's retry settings on every broker group (None where it is not configured,
        i.e. has the defaults)."""
        targets = await self._brokers(broker_name, reads=True)
        query = SubscriptionGroupQuery(group=group)
        answers = await self._each(targets, query.code, *query.encode())
        out: dict[str, dict[str, Any] | None] = {}
        errors = []
        for name, answer in answers.items():
            if (
                isinstance(answer, BrokerError)
                and answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
            ):
                out[name] = None
            elif isinstance(answer, Frame):
                out[name] = _unpack_map(answer)
            else:
                errors.append(f"{name}: {answer}")
        if errors:
            raise ClientError(f"reading subscription group {group!r} failed on {'; '.join(errors)}")
        return out

    async def group_exists(self, group: str, broker_name: str | None = None) -> bool:
        """Whether consumer group ``group`` exists on some broker group (or on ``broker_name``),
        as the brokers count it (deleteSubGroup, resendMessage): its settings are configured,
        its retry or dead-letter topic is routed, or a broker has its committed offsets or a
        live member. A broker group that cannot be asked counts as knowing it (a group is never
        said to be missing on a guess)."""
        for topic in (retry_topic(group), dlq_topic(group)):
            try:
                route = await self.topic_route(topic)
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    return True
                continue
            if broker_name is None or any(b.broker_name == broker_name for b in route.brokers):
                return True
        targets = await self._brokers(broker_name, reads=True)
        settings = SubscriptionGroupQuery(group=group)
        stats = ConsumeStatsQuery(group=group)
        members = ConsumerConnectionsQuery(group=group)
        for code, header in (
            (settings.code, settings.encode()[0]),
            (stats.code, stats.encode()[0]),
            (members.code, members.encode()[0]),
        ):
            for answer in (await self._each(targets, code, header)).values():
                if isinstance(answer, BrokerError):
                    if answer.code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                        return True
                elif isinstance(answer, str) or code == settings.code:
                    return True  # not asked (it may know the group), or configured there
                elif _knows(code == stats.code, answer, group):
                    return True
        return False

    async def require_group(self, group: str, broker_name: str | None = None) -> None:
        """:class:`GroupNotFoundError` unless ``group`` exists (:meth:`group_exists`) on some
        broker group, or on ``broker_name``."""
        if not await self.group_exists(group, broker_name):
            where = f"on broker group {broker_name}" if broker_name else "on any broker group"
            raise GroupNotFoundError(
                f"consumer group {group} does not exist {where} (no settings, offsets, members, "
                "retry or dead-letter topic)"
            )

    async def query_dlq(
        self, group: str, broker_name: str | None = None, max_count: int = 1000
    ) -> dict[str, list[dict[str, Any]]]:
        """The messages of ``group``'s DLQ, per broker group (oldest first, at most
        ``max_count`` each)."""
        targets = await self._brokers(broker_name, reads=True)
        query = DlqQuery(group=group, max_count=max_count)
        answers = await self._each(targets, query.code, *query.encode())
        docs = _bodies(answers, f"querying the DLQ of {group!r}")
        return {name: list(doc.get("messages") or []) for name, doc in docs.items()}

    async def resend_dlq(
        self, group: str, msg_id: str | None = None, broker_name: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """Re-send ``group``'s DLQ messages (all not re-sent before, or the one ``msg_id``) to
        their original topics; broker name -> ``{"resent": [...], "skipped": [...]}``."""
        masters = await self._brokers(broker_name)
        resend = DlqResend(group=group, msg_id=msg_id or None)
        answers = await self._each(masters, resend.code, *resend.encode())
        if msg_id:
            # The id names one record; only the group that holds it finds it.
            found = {n: a for n, a in answers.items() if isinstance(a, Frame)}
            if not found:
                missing = all(
                    isinstance(a, BrokerError) and a.code == ResponseCode.MESSAGE_NOT_FOUND
                    for a in answers.values()
                )
                if missing:
                    raise MessageNotFoundError(f"{msg_id} is not a message of the DLQ of {group!r}")
                return _bodies(answers, f"re-sending {msg_id}")
            answers = dict(found)
        return _bodies(answers, f"re-sending the DLQ of {group!r}")


def _knows(stats: bool, answer: Frame, group: str) -> bool:
    """A GET_CONSUME_STATS (``stats``) or GET_CONSUMER_CONNECTION_LIST answer for ``group``:
    whether it has rows (committed offsets, subscriptions) or live members there; a malformed
    answer counts as knowing it."""
    try:
        if stats:
            return bool(ConsumeStats.decode(answer.body).groups.get(group))
        return bool(decode_connections(answer.body))
    except StatsError:
        return True


def _unpack_map(frame: Frame) -> dict[str, Any]:
    doc = msgpack.unpackb(frame.body or b"\x80", raw=False)
    if not isinstance(doc, dict):
        raise ClientError("malformed answer: not a map")
    return doc


def _bodies(answers: dict[str, Frame | BrokerError | str], what: str) -> dict[str, dict[str, Any]]:
    errors = [f"{n}: {a}" for n, a in answers.items() if not isinstance(a, Frame)]
    if errors:
        raise ClientError(f"{what} failed on {'; '.join(errors)}")
    return {n: _unpack_map(a) for n, a in answers.items() if isinstance(a, Frame)}
