"""Broker figures across a cluster: statsAll (per topic and consumer group TPS), clusterRT and
checkMsgSendRT (send round-trips per broker group).

statsAll asks every broker group's master for its rates (VIEW_BROKER_STATS_DATA) and adds them
up. The round-trip commands send small messages one at a time straight to each group's master
(no SDK batching, retries or routing in the way) and time each answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from client.admin import Admin
from client.bootstrap import describe_failure
from client.errors import BrokerError, ClientError
from client.routes import ClusterBroker
from protocol.broker_requests.runtime import StatsData, StatsQuery
from protocol.broker_requests.send import SendRequest
from protocol.remoting import Frame
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from rmqctl.broker_admin import TIMEOUT, BrokerRef, ask_each, failures
from rmqctl.common import (
    CommandError,
    Settings,
    addresses_option,
    emit,
    one_cluster,
    pass_settings,
    run,
    table,
)

PROBE_TOPIC = "rmqctl_rt_probe"


def masters(clusters: dict[str, list[ClusterBroker]], cluster: str | None) -> list[BrokerRef]:
    """The master of every broker group (of ``cluster`` only when given), by group name."""
    chosen = [one_cluster(clusters, cluster)] if cluster is not None else list(clusters.values())
    found = {b.broker_name: b for bs in chosen for b in bs if b.is_master}
    if not found:
        raise ClientError("no broker group has a master now")
    return [
        BrokerRef(b.address, b.broker_name, b.broker_id)
        for b in sorted(found.values(), key=lambda b: b.broker_name)
    ]


# -- statsAll ----------------------------------------------------------------------------------


@dataclass(slots=True)
class TopicRow:
    put_tps: float = 0.0
    get_tps: float = 0.0
    put_total: int = 0
    get_total: int = 0
    groups: dict[str, float] = field(default_factory=dict)


def merge_stats(answers: Sequence[StatsData]) -> dict[str, TopicRow]:
    """Every broker group's rates added up per topic, and per consumer group of each topic."""
    rows: dict[str, TopicRow] = {}
    for data in answers:
        for t in data.topics:
            row = rows.setdefault(t.topic, TopicRow())
            row.put_tps += t.put_tps
            row.get_tps += t.get_tps
            row.put_total += t.put_total
            row.get_total += t.get_total
        for g in data.groups:
            row = rows.setdefault(g.topic, TopicRow())
            row.groups[g.group] = row.groups.get(g.group, 0.0) + g.consume_tps
    return dict(sorted(rows.items()))


def stats_docs(rows: dict[str, TopicRow]) -> list[dict[str, Any]]:
    return [
        {
            "topic": topic,
            "putTps": round(r.put_tps, 2),
            "getTps": round(r.get_tps, 2),
            "putTotal": r.put_total,
            "getTotal": r.get_total,
            "groups": [
                {"group": g, "consumeTps": round(tps, 2)} for g, tps in sorted(r.groups.items())
            ],
        }
        for topic, r in rows.items()
    ]


def stats_table(docs: Sequence[dict[str, Any]]) -> str:
    """One row per topic (consumer group "*": every group together; its Out TPS and Out Total
    are the messages served to all of them), then one per consumer group with only its own Out
    TPS (how fast its committed offsets move): the brokers count messages served per topic,
    not per group, so a group's row has no totals."""
    lines: list[list[object]] = []
    for d in docs:
        lines.append([d["topic"], "*", d["putTps"], d["getTps"], d["putTotal"], d["getTotal"]])
        for g in d["groups"]:
            lines.append([d["topic"], g["group"], "", g["consumeTps"], "", ""])
    return table(["Topic", "Consumer Group", "In TPS", "Out TPS", "In Total", "Out Total"], lines)


@click.command("statsAll", short_help="Messages per second per topic and consumer group.")
@addresses_option
@click.option("-t", "--topic", default=None, metavar="TOPIC", help="Only this topic.")
@pass_settings
def stats_all(settings: Settings, addresses: str, topic: str | None) -> None:
    """Show, per topic, the messages stored (In) and served (Out) per second over the last 10 s
    on every broker group's master, added up, and per consumer group of the topic how fast its
    committed offsets move (Out TPS of that group); totals count since each broker started. The
    table has a row per topic (consumer group "*": Out TPS and Out Total are the messages
    served to every group together), then a row per consumer group with its Out TPS alone (the
    brokers count messages served per topic, not per group). A deleted topic is not listed.
    Exit status 1 when a broker group could not be asked (the others are counted and printed
    first), or no broker group has the topic of -t.

    Prints {"topics": [{"topic", "putTps", "getTps", "putTotal", "getTotal", "groups":
    [{"group", "consumeTps"}]}], "failed": [lines]}.
    """

    async def work() -> tuple[list[BrokerRef], list[StatsData | str]]:
        async with Admin(addresses) as admin:
            brokers = masters(await admin.cluster_info(), None)
        ask = StatsQuery()

        def read(resp: Frame) -> StatsData:
            return StatsData.parse(resp.header, resp.body)

        return brokers, await ask_each(brokers, ask.code, *ask.encode(), read)

    brokers, answers = run(work())
    failed = failures(brokers, answers)
    rows = merge_stats([a for a in answers if isinstance(a, StatsData)])
    if topic is not None:
        rows = {t: r for t, r in rows.items() if t == topic}
        if not rows and not failed:  # every master lists each topic it has, idle ones too
            raise CommandError(f"no broker group has topic {topic!r}")
    docs = stats_docs(rows)
    if len(failed) < len(brokers):
        emit(settings, {"topics": docs, "failed": failed}, lambda: stats_table(docs))
    if failed:
        raise CommandError("not every broker group answered: " + "; ".join(failed))


# -- clusterRT, checkMsgSendRT -----------------------------------------------------------------


@dataclass(slots=True)
class RoundTrips:
    """One broker group's timed sends."""

    ref: BrokerRef
    rts_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        rts = sorted(self.rts_ms)
        return self.ref.to_dict() | {
            "sent": len(rts),
            "failed": len(self.errors),
            "avgRtMs": round(sum(rts) / len(rts), 3) if rts else None,
            "p99RtMs": round(rts[min(len(rts) - 1, int(len(rts) * 0.99))], 3) if rts else None,
            "maxRtMs": round(rts[-1], 3) if rts else None,
            "errors": sorted(set(self.errors)),
        }


async def time_sends(
    brokers: Sequence[tuple[BrokerRef, int]], topic: str, amount: int, size: int
) -> list[RoundTrips]:
    """Send ``amount`` messages of ``size`` bytes to each broker's queues of ``topic`` (the
    int: its queue count) in turn, one at a time, timing each answer."""
    pool = ConnectionPool(TIMEOUT)
    body = b"r" * size
    results = [RoundTrips(ref) for ref, _ in brokers]
    try:
        for (ref, queues), result in zip(brokers, results, strict=True):
            for i in range(amount):
                request = SendRequest(topic=topic, body=body, queue_id=i % max(1, queues))
                start = time.perf_counter()
                try:
                    conn = await pool.get(ref.address)
                    await conn.call(request.code, *request.encode(), TIMEOUT)
                except ResponseError as exc:
                    result.errors.append(str(BrokerError(exc.code, exc.remark)))
                    continue
                except RemotingError as exc:
                    result.errors.append(describe_failure(exc))
                    continue
                result.rts_ms.append((time.perf_counter() - start) * 1000)
    finally:
        pool.close()
    return results


def rt_report(settings: Settings, topic: str, results: Sequence[RoundTrips]) -> None:
    docs = [r.to_dict() for r in results]
    rows = [
        [d["brokerName"], d["address"], d["sent"], d["failed"], d["avgRtMs"], d["p99RtMs"],
         d["maxRtMs"]]
        for d in docs
    ]  # fmt: skip
    headers = ["Broker Name", "Address", "Sent", "Failed", "Avg RT (ms)", "P99 RT", "Max RT"]
    emit(settings, {"topic": topic, "brokers": docs}, lambda: table(headers, rows))
    failed = [f"{r.ref.label()}: {r.errors[0]}" for r in results if r.errors]
    if failed:
        raise CommandError("sends failed on " + "; ".join(failed))


amount_option = click.option(
    "--amount",
    default=100,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Messages sent to each broker group.",
)
size_option = click.option(
    "-s",
    "--size",
    default=128,
    show_default=True,
    type=click.IntRange(1, 4 * 1024 * 1024),
    help="Body bytes of each message.",
)


@click.command("checkMsgSendRT", short_help="Send round-trip to each broker group of a topic.")
@addresses_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic to send to.")
@amount_option
@size_option
@pass_settings
def check_msg_send_rt(
    settings: Settings, addresses: str, topic: str, amount: int, size: int
) -> None:
    """Send --amount messages of --size bytes to TOPIC on each of its broker groups (straight
    to the master, its queues in turn, one message at a time) and print each group's average,
    99th percentile and largest round-trip: request written to answer read, so the network
    both ways, the broker's work and its wait for the flush and the replicas as its flush and
    all-ack settings ask. The messages stay in the topic. Exit status 1 when a send failed (the
    figures are printed first) or the topic is unknown.

    Prints {"topic", "brokers": [{"brokerName", "brokerId", "address", "sent", "failed",
    "avgRtMs", "p99RtMs", "maxRtMs", "errors"}]}.
    """

    async def work() -> list[RoundTrips]:
        async with Admin(addresses) as admin:
            route = await admin.topic_route(topic)
            try:  # the masters' ids, for the output; a user may read the route but not these
                clusters = await admin.cluster_info()
            except BrokerError:
                clusters = {}
        ids = {b.address: b.broker_id for bs in clusters.values() for b in bs}
        brokers = [
            (BrokerRef(b.master_address, b.broker_name, ids.get(b.master_address)), b.queues)
            for b in route.brokers
            if b.master_address
        ]
        if not brokers:
            raise ClientError(f"no broker group of topic {topic!r} has a master now")
        return await time_sends(brokers, topic, amount, size)

    rt_report(settings, topic, run(work()))


@click.command("clusterRT", short_help="Send round-trip to every broker group of a cluster.")
@addresses_option
@click.option("-c", "--cluster", default=None, metavar="CLUSTER", help="Only this cluster.")
@click.option(
    "-t",
    "--topic",
    default=PROBE_TOPIC,
    show_default=True,
    metavar="TOPIC",
    help="Topic the probe messages go to; created with one queue on each master that lacks it.",
)
@amount_option
@size_option
@pass_settings
def cluster_rt(
    settings: Settings, addresses: str, cluster: str | None, topic: str, amount: int, size: int
) -> None:
    """Send --amount messages of --size bytes to every broker group's master (of CLUSTER, or of
    every cluster) and print each group's average, 99th percentile and largest send
    round-trip, as checkMsgSendRT does. The messages go to TOPIC (default rmqctl_rt_probe),
    created with one queue on the masters that lack it (which needs create permission on it),
    and stay there until retention. Exit status 1 when a send failed (the figures are printed
    first).

    Prints {"topic", "brokers": [{"brokerName", "brokerId", "address", "sent", "failed",
    "avgRtMs", "p99RtMs", "maxRtMs", "errors"}]}.
    """

    async def work() -> list[RoundTrips]:
        async with Admin(addresses) as admin:
            brokers = masters(await admin.cluster_info(), cluster)
            try:
                route = await admin.topic_route(topic)
                queues = {b.broker_name: b.queues for b in route.brokers}
            except BrokerError:
                queues = {}
            if any(b.broker_name not in queues for b in brokers):
                count = max(queues.values(), default=1)  # creating never shrinks a topic
                await admin.create_topic(topic, count, cluster)
                queues |= {b.broker_name: queues.get(b.broker_name, count) for b in brokers}
        return await time_sends([(b, queues[b.broker_name]) for b in brokers], topic, amount, size)

    rt_report(settings, topic, run(work()))
