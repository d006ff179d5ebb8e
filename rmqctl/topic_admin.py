"""Listing and deleting topics and consumer groups: topicList, topicStatus, deleteTopic and
deleteSubGroup (docs/operations.md, "Listing and deleting topics and groups").

The rendering (documents, tables) is pure; the requests go to the controllers (topicList,
deleteTopic, deleteSubGroup) and to each broker group's master (topicStatus, the consumer
groups topicList counts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from client.admin import Admin
from client.errors import BrokerError, ClientError
from client.routes import TopicRoute
from protocol.codes import ResponseCode, code_name
from protocol.controller_requests.topics import (
    BrokerOutcome,
    DeleteReport,
    DeleteSubGroup,
    DeleteTopic,
    TopicList,
    TopicListQuery,
)
from protocol.fields import FieldError
from protocol.pull import AllConsumerOffsetsQuery, ConsumerOffsetTable
from protocol.remoting import Frame
from protocol.topic_admin import QueueStatus, TopicStats, TopicStatsQuery
from protocol.topic_attrs import TopicAttrs, perm_text
from rmqctl.common import (
    CommandError,
    Settings,
    addresses_option,
    emit,
    group_option,
    one_cluster,
    pass_settings,
    run,
    table,
    topic_option,
    utc_iso,
)
from rmqctl.controller_calls import call_controllers


class TopicAdmin(Admin):
    """The broker side of topicList and topicStatus."""

    async def consumer_groups(self) -> dict[str, list[str]]:
        """topic -> the consumer groups with an offset on it on some master, sorted."""
        masters = await self._brokers(None, reads=True)
        ask = AllConsumerOffsetsQuery()
        answers = await self._each(masters, ask.code, *ask.encode())
        by_topic: dict[str, set[str]] = {}
        for answer in answers.values():
            if not isinstance(answer, Frame):
                continue  # a group without a reachable broker: its groups are not counted
            try:
                offsets = ConsumerOffsetTable.parse(answer.header, answer.body).offsets
            except FieldError:
                continue
            for group, topics in offsets.items():
                for topic in topics:
                    by_topic.setdefault(topic, set()).add(group)
        return {t: sorted(g) for t, g in by_topic.items()}

    async def topic_status(
        self, topic: str, route: TopicRoute | None = None
    ) -> list[tuple[str, QueueStatus]]:
        """(broker name, queue status) for each queue of ``topic`` on each broker group that
        serves it (its master, or a slave while it has none), by broker name then queue.
        ``route``: the topic's, when the caller has it (None: asked here)."""
        route = route or await self.topic_route(topic)
        targets = {
            b.broker_name: b.master_address or b.slaves[0]
            for b in route.brokers
            if b.master_address or b.slaves
        }
        if not targets:
            raise ClientError(f"topic {topic!r} has no broker that can answer")
        ask = TopicStatsQuery(topic=topic)
        answers = await self._each(targets, ask.code, *ask.encode())
        rows: list[tuple[str, QueueStatus]] = []
        failures: list[str] = []
        for name, answer in sorted(answers.items()):
            if isinstance(answer, Frame):
                try:
                    stats = TopicStats.parse(answer.header, answer.body)
                except FieldError as exc:
                    failures.append(f"{name}: malformed answer ({exc})")
                    continue
                rows.extend((name, q) for q in stats.queues)
            elif isinstance(answer, BrokerError):
                if answer.code != ResponseCode.TOPIC_NOT_EXIST:
                    failures.append(f"{name}: {answer}")
            else:
                failures.append(answer)
        if failures:
            raise ClientError(f"topicStatus of {topic!r} failed on " + "; ".join(failures))
        if not rows and not self.blind(route):
            raise ClientError(f"topic {topic!r} has no queues on any broker")
        return rows

    @staticmethod
    def blind(route: TopicRoute) -> dict[str, int]:
        """broker name -> its queue count, for the broker groups of ``route`` with no master
        and no slave registered: nobody can tell their offsets."""
        return {
            b.broker_name: b.queues for b in route.brokers if not b.master_address and not b.slaves
        }


# --- documents and tables (pure) -----------------------------------------------------------


def topic_list_doc(listed: TopicList, groups: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "topics": [
            {
                "topic": t.topic,
                "cluster": t.cluster,
                "queues": sum(t.queues.values()),
                "perm": t.summary.perm,
                "messageType": t.summary.message_type.value,
                "brokers": t.queues,
                "consumerGroups": groups.get(t.topic, []),
            }
            for t in listed.topics
        ]
    }


def topic_list_table(doc: dict[str, Any]) -> str:
    rows = [
        [
            t["cluster"],
            t["topic"],
            t["queues"],
            perm_text(t["perm"]),
            t["messageType"],
            len(t["brokers"]),
            len(t["consumerGroups"]),
            ", ".join(t["consumerGroups"]) or "-",
        ]
        for t in doc["topics"]
    ]
    return table(
        ["Cluster", "Topic", "Queues", "Perm", "Type", "Brokers", "Groups", "Consumer Groups"],
        rows,
    )


NO_MASTER_NOTE = "no master: offsets not known"


def topic_status_doc(
    topic: str,
    rows: Sequence[tuple[str, QueueStatus]],
    attrs: Mapping[str, TopicAttrs] | None = None,
    blind: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """``attrs``: the topic's permission and type on each broker group (the route's): then
    each group is in ``brokers``, ``{name: {"perm", "messageType"}}``. ``blind``: broker name
    -> queue count of the groups with no master and no slave to ask: their queues are listed
    with offsets None and ``"note"``."""
    doc: dict[str, Any] = {"topic": topic}
    if attrs is not None:
        doc["brokers"] = {
            name: {"perm": a.perm, "messageType": a.message_type.value}
            for name, a in sorted(attrs.items())
        }
    return doc | {
        "queues": [
            {
                "brokerName": name,
                "queueId": q.queue_id,
                "minOffset": q.min_offset,
                "maxOffset": q.max_offset,
                "lastUpdateMs": q.last_update_ms,
                "note": None,
            }
            for name, q in rows
        ]
        + [
            {
                "brokerName": name,
                "queueId": queue_id,
                "minOffset": None,
                "maxOffset": None,
                "lastUpdateMs": None,
                "note": NO_MASTER_NOTE,
            }
            for name, queues in sorted((blind or {}).items())
            for queue_id in range(queues)
        ],
    }


def topic_status_table(doc: dict[str, Any]) -> str:
    rows = [
        [
            q["brokerName"],
            q["queueId"],
            "?" if q["minOffset"] is None else q["minOffset"],
            "?" if q["maxOffset"] is None else q["maxOffset"],
            utc_iso(q["lastUpdateMs"]) if q["lastUpdateMs"] else "-",
            q.get("note") or "",
        ]
        for q in doc["queues"]
    ]
    head = f"Topic: {doc['topic']}\n"
    for name, a in doc.get("brokers", {}).items():
        head += f"{name}: perm {perm_text(a['perm'])}, message type {a['messageType']}\n"
    return head + table(
        ["Broker Name", "Queue", "Min Offset", "Max Offset", "Last Updated (UTC)", "Note"], rows
    )


def _outcome_doc(o: BrokerOutcome, absent: int) -> dict[str, Any]:
    return {
        "brokerName": o.broker_name,
        "address": o.address,
        "deleted": o.code == ResponseCode.SUCCESS,
        "absent": o.code == absent,
        "code": o.code,
        "remark": o.remark,
    }


def delete_doc(key: str, report: DeleteReport, absent: int) -> dict[str, Any]:
    """The deleteTopic / deleteSubGroup document: each broker deleted, had nothing, or failed."""
    return {key: report.name, "brokers": [_outcome_doc(o, absent) for o in report.brokers]}


def delete_table(doc: dict[str, Any]) -> str:
    def state(b: dict[str, Any]) -> str:
        if b["deleted"]:
            return "deleted"
        if b["absent"]:
            return "not there"
        return f"FAILED: {code_name(b['code'])} {b['remark']}".rstrip()

    rows = [[b["brokerName"], b["address"], state(b)] for b in doc["brokers"]]
    return table(["Broker Name", "Address", "Result"], rows)


def failed_brokers(doc: dict[str, Any]) -> list[str]:
    return [
        f"{b['brokerName']} ({b['address']})"
        for b in doc["brokers"]
        if not b["deleted"] and not b["absent"]
    ]


async def ask_delete(addresses: str, ask: DeleteTopic | DeleteSubGroup) -> DeleteReport:
    """deleteTopic's or deleteSubGroup's request to the controllers, and each broker's outcome."""
    resp = await call_controllers(addresses, ask.code, *ask.encode())
    try:
        return DeleteReport.parse(resp.header, resp.body)
    except FieldError as exc:
        what = "deleteTopic" if isinstance(ask, DeleteTopic) else "deleteSubGroup"
        raise ClientError(f"malformed {what} answer: {exc}") from None


async def delete_everywhere(
    addresses: str, ask: DeleteTopic | DeleteSubGroup
) -> tuple[dict[str, Any], list[str]]:
    """Ask the controllers to delete a topic or a consumer group everywhere: the document
    (:func:`delete_doc`, a broker without it counted as absent) and :func:`failed_brokers`."""
    report = await ask_delete(addresses, ask)
    if isinstance(ask, DeleteTopic):
        doc = delete_doc("topic", report, ResponseCode.TOPIC_NOT_EXIST)
    else:
        doc = delete_doc("group", report, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
    return doc, failed_brokers(doc)


# --- commands ------------------------------------------------------------------------------


@click.command("topicList", short_help="List every topic with its queues and consumer groups.")
@addresses_option
@click.option("-c", "--cluster", default=None, metavar="CLUSTER", help="Only this cluster.")
@pass_settings
def topic_list(settings: Settings, addresses: str, cluster: str | None) -> None:
    """List every topic the controllers and the live brokers know (of one cluster with -c):
    its queues in all, the broker groups that hold it, and the consumer groups with an offset
    on it (mqadmin topicList -c prints the cluster, topic and consumer group). A cluster the
    controllers do not know is refused.

    Prints {"topics": [{"topic", "cluster", "queues", "perm", "messageType", "brokers": {name:
    queues}, "consumerGroups": [names]}]}.
    """

    async def work() -> dict[str, Any]:
        ask = TopicListQuery(cluster=cluster)
        resp = await call_controllers(addresses, ask.code, *ask.encode())
        try:
            listed = TopicList.parse(resp.header, resp.body)
        except FieldError as exc:
            raise ClientError(f"malformed topic list: {exc}") from None
        async with TopicAdmin(addresses) as admin:
            if cluster is not None and not listed.topics:  # no topic, or no such cluster
                one_cluster(await admin.cluster_info(), cluster)
            try:
                groups = await admin.consumer_groups()
            except ClientError:  # no broker to ask: the topics are listed all the same
                groups = {}
        return topic_list_doc(listed, groups)

    doc = run(work())
    emit(settings, doc, lambda: topic_list_table(doc))


@click.command("topicStatus", short_help="Show each queue's min and max offset and last update.")
@addresses_option
@topic_option
@pass_settings
def topic_status(settings: Settings, addresses: str, topic: str) -> None:
    """Show each queue of a topic on each broker group: its min and max offset and when its
    newest message was stored.

    A broker group with no master is read at a slave; one with no master and no slave
    registered is listed from the route, each queue with "?" offsets and the note "no master:
    offsets not known" (--json: offsets null, "note"), and the exit status is 1.

    Prints {"topic", "brokers": {name: {"perm", "messageType"}}, "queues": [{"brokerName",
    "queueId", "minOffset", "maxOffset", "lastUpdateMs", "note"}]} (lastUpdateMs 0: the queue
    holds no message).
    """

    async def work() -> dict[str, Any]:
        async with TopicAdmin(addresses) as admin:
            route = await admin.topic_route(topic)
            rows = await admin.topic_status(topic, route)
        attrs = {b.broker_name: b.attrs for b in route.brokers}
        return topic_status_doc(topic, rows, attrs, admin.blind(route))

    doc = run(work())
    emit(settings, doc, lambda: topic_status_table(doc))
    blind = sorted({q["brokerName"] for q in doc["queues"] if q["note"]})
    if blind:
        raise CommandError(
            f"{', '.join(blind)}: no master and no slave registered with the controllers: "
            "offsets not known"
        )


@click.command("deleteTopic", short_help="Delete a topic from the controllers and every broker.")
@addresses_option
@topic_option
@click.option(
    "--force", is_flag=True, help="Delete even while a producer sends to it (messages are lost)."
)
@pass_settings
def delete_topic(settings: Settings, addresses: str, topic: str, force: bool) -> None:
    """Delete a topic: from the controllers' replicated metadata, then every broker's topic
    config, consumer offsets and ConsumeQueues (the CommitLog keeps the bytes until
    retention). A send to it then answers TOPIC_NOT_EXIST; updateTopic creates it again,
    empty. Refused: a system topic, a group's retry or dead-letter topic (deleteSubGroup), an
    unknown topic, and without --force a topic that took a send lately (a live producer).

    Prints {"topic", "brokers": [{"brokerName", "address", "deleted", "absent", "code",
    "remark"}]}; exits 1 when a broker could not delete it (run it again once it is back).
    """
    doc, failed = run(delete_everywhere(addresses, DeleteTopic(topic=topic, force=force)))
    emit(settings, doc, lambda: f"Topic {topic} deleted\n" + delete_table(doc))
    if failed:
        raise CommandError(
            f"topic {topic} is deleted from the controllers but still on "
            f"{', '.join(failed)}: run deleteTopic again once they are back"
        )


@click.command("deleteSubGroup", short_help="Delete a consumer group on every broker.")
@addresses_option
@group_option
@click.option(
    "--remove-dlq", is_flag=True, help="Also delete the group's dead-letter topic (%DLQ%GROUP)."
)
@pass_settings
def delete_sub_group(settings: Settings, addresses: str, group: str, remove_dlq: bool) -> None:
    """Delete a consumer group on every broker: its settings, its offsets on every topic and
    its retry topic (%RETRY%GROUP); its dead-letter topic stays unless --remove-dlq. Members
    still running start again from their consume-from position. Refused: a system group, a
    group no broker knows.

    Prints {"group", "brokers": [{"brokerName", "address", "deleted", "absent", "code",
    "remark"}]}; exits 1 when a broker could not delete it (run it again once it is back).
    """
    ask = DeleteSubGroup(group=group, remove_dlq=remove_dlq)
    doc, failed = run(delete_everywhere(addresses, ask))
    emit(settings, doc, lambda: f"Consumer group {group} deleted\n" + delete_table(doc))
    if failed:
        raise CommandError(
            f"consumer group {group} is still on {', '.join(failed)}: run deleteSubGroup "
            "again once they are back"
        )
