"""Consumer and producer group commands: consumerProgress, consumerConnection,
producerConnection.

The rendering (rows, totals, tables) is pure and unit-tested apart from the requests.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from client.admin import Admin
from client.progress import (
    NO_BROKER_REGISTERED,
    BrokerAnswer,
    Member,
    NoBrokerRegistered,
    ProgressAdmin,
    allocation,
)
from client.routes import LOGICAL_BROKER, MessageQueue
from protocol.broker_requests.producers import (
    ProducerConnection,
    ProducerConnections,
    ProducerConnectionsQuery,
)
from protocol.remoting import Frame
from protocol.static_topic import LogicalQueue, logical_max, resume_offset
from rmqctl.broker_admin import BrokerRef, ask_each, failures
from rmqctl.common import (
    CommandError,
    Settings,
    addresses_option,
    emit,
    group_option,
    pass_settings,
    run,
    table,
)


@dataclass(frozen=True, slots=True)
class ProgressRow:
    """One queue of one group, as consumerProgress prints it."""

    group: str
    topic: str
    broker_name: str
    queue_id: int
    max_offset: int
    consumer_offset: int | None
    lag: int
    last_consume_ms: int | None
    inflight: int = 0
    #: a static topic's logical queue (``queue_id``), its offsets logical and ``broker_name``
    #: the group of its newest item
    logical: bool = False
    #: the queue's broker group has no master and no slave answered: listed from the route,
    #: its figures unknown (offsets and lag None in --json, "?" in the table, not in totals)
    no_master: bool = False

    def to_dict(self) -> dict[str, Any]:
        known = not self.no_master
        return {
            "group": self.group,
            "topic": self.topic,
            "brokerName": self.broker_name,
            "queueId": self.queue_id,
            "maxOffset": self.max_offset if known else None,
            "consumerOffset": self.consumer_offset,
            "lag": self.lag if known else None,
            "lastConsumeMs": self.last_consume_ms,
            "popInflight": self.inflight,
            "logical": self.logical,
            "noMaster": self.no_master,
        }


def progress_rows(answers: Sequence[BrokerAnswer]) -> list[ProgressRow]:
    """Every answered queue row, sorted by (group, topic, broker, queue id)."""
    rows = [
        ProgressRow(
            group,
            q.topic,
            a.target.broker_name,
            q.queue_id,
            q.max_offset,
            q.consumer_offset,
            q.lag,
            q.last_consume_ms,
            q.inflight,
        )
        for a in answers
        if a.stats is not None
        for group, queues in a.stats.groups.items()
        for q in queues
    ]
    return sorted(rows, key=lambda r: (r.group, r.topic, r.broker_name, r.queue_id))


def logical_rows(
    rows: Sequence[ProgressRow], mappings: dict[str, tuple[LogicalQueue, ...]]
) -> list[ProgressRow]:
    """``rows`` with each static topic's physical rows (its items' queues, as the brokers
    report them) folded into one row per logical queue: max offset the newest item's max
    translated, consumer offset the group's logical offset (read back from the newest item with
    a committed offset, the way a consumer resumes), lag the difference (the items' lags summed
    while the group committed nowhere). Physical queues no item maps are left out; other topics'
    rows stay as they are. Sorted like :func:`progress_rows`."""
    out = [r for r in rows if r.topic not in mappings]
    physical = {
        (r.group, r.topic, r.broker_name, r.queue_id): r for r in rows if r.topic in mappings
    }
    groups = sorted({(r.group, r.topic) for r in rows if r.topic in mappings})
    for group, topic in groups:
        for queue_id, items in enumerate(mappings[topic]):
            found = [
                (item, physical.get((group, topic, item.broker_name, item.physical_queue)))
                for item in items
            ]
            last = found[-1][1]
            if last is None:
                continue  # the newest item's group did not answer (reported as a failure)
            max_offset = logical_max(items, last.max_offset)
            committed = resume_offset(
                items,
                {
                    item.generation: r.consumer_offset
                    for item, r in found
                    if r is not None and r.consumer_offset is not None
                },
            )
            answered = [r for _, r in found if r is not None]
            lag = (
                sum(r.lag for r in answered)
                if committed is None
                else max(0, max_offset - committed)
            )
            times = [r.last_consume_ms for r in answered if r.last_consume_ms]
            out.append(
                ProgressRow(
                    group,
                    topic,
                    items[-1].broker_name,
                    queue_id,
                    max_offset,
                    committed,
                    lag,
                    max(times) if times else None,
                    sum(r.inflight for r in answered),
                    logical=True,
                )
            )
    return sorted(out, key=lambda r: (r.group, r.topic, r.broker_name, r.queue_id))


def masterless_rows(
    group: str,
    queues_by_topic: dict[str, list[MessageQueue]],
    answered: set[str],
    errors: dict[str, str],
) -> tuple[list[ProgressRow], list[str]]:
    """The queues of the topics ``group`` consumes (from their routes) on broker groups that did
    not answer (not in ``answered``: no master, and no slave could be asked), as rows without
    figures, and one note per such broker group (``errors``: broker name -> why it was not
    asked; a group missing there has no broker registered at all). A static topic's logical
    queues are left to the logical rows."""
    rows = [
        ProgressRow(group, topic, mq.broker_name, mq.queue_id, 0, None, 0, None, no_master=True)
        for topic, queues in sorted(queues_by_topic.items())
        for mq in queues
        if mq.broker_name not in answered and mq.broker_name != LOGICAL_BROKER
    ]
    notes = []
    for name in sorted({r.broker_name for r in rows}):
        mine = [r for r in rows if r.broker_name == name]
        why = errors.get(name, "none of its brokers is registered with the controllers")
        topics = ", ".join(sorted({r.topic for r in mine}))
        notes.append(
            f"{name}: no master, and no slave could be asked ({why}): its {len(mine)} queues "
            f"of {topics} are listed without figures"
        )
    return rows, notes


def group_totals(rows: Sequence[ProgressRow]) -> dict[str, tuple[int, int]]:
    """group -> (total lag, queues), sorted by group."""
    totals: dict[str, tuple[int, int]] = {}
    for r in rows:
        lag, queues = totals.get(r.group, (0, 0))
        totals[r.group] = (lag + r.lag, queues + 1)
    return dict(sorted(totals.items()))


def format_time(ms: int | None) -> str:
    """Epoch ms as UTC ``YYYY-MM-DD HH:MM:SS``; ``-`` when unknown."""
    if not ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def source_notes(answers: Sequence[BrokerAnswer]) -> list[str]:
    """One line per broker group read from a slave (no master now)."""
    return [
        f"{a.target.broker_name}: no master now; read from slave {a.target.address} "
        "(its committed offsets may be up to one offset-sync interval old)"
        for a in answers
        if a.target.from_slave and a.stats is not None
    ]


def not_opened(answers: Sequence[BrokerAnswer]) -> list[dict[str, str]]:
    """The (broker group, group, topic) a broker left out of its answer because a ConsumeQueue
    of the topic was not opened yet since its start (it opens a bounded number per request),
    sorted: ``--json``'s ``notOpened``."""
    return sorted(
        (
            {"brokerName": a.target.broker_name, "group": group, "topic": topic}
            for a in answers
            if a.stats is not None
            for group, topics in a.stats.not_opened.items()
            for topic in topics
        ),
        key=lambda d: (d["brokerName"], d["group"], d["topic"]),
    )


def not_opened_notes(left: Sequence[dict[str, str]]) -> list[str]:
    """One line per broker group that left topics out (see :func:`not_opened`)."""
    notes = []
    for name in sorted({d["brokerName"] for d in left}):
        mine = [d for d in left if d["brokerName"] == name]
        topics = sorted({d["topic"] for d in mine})
        groups = {d["group"] for d in mine}
        shown = ", ".join(topics[:5]) + (f" and {len(topics) - 5} more" if len(topics) > 5 else "")
        notes.append(
            f"{name}: {len(topics)} topic(s) of {len(groups)} group(s) left out ({shown}): "
            "their ConsumeQueues were not opened yet since the broker's start, and one request "
            "opens a bounded number of them; asked again (the command run again, the page "
            "reloaded), it opens more"
        )
    return notes


def progress_table(group: str, rows: Sequence[ProgressRow], notes: Sequence[str]) -> str:
    pop = any(r.inflight for r in rows)  # a POP group: its in-flight messages per queue

    def unknown_or(r: ProgressRow, value: object) -> object:
        return "?" if r.no_master else value

    body = table(
        [
            "Topic",
            "Broker Name",
            "QID",
            "Max Offset",
            "Consumer Offset",
            "Lag",
            *(["In Flight"] if pop else []),
            "Last Consume (UTC)",
        ],
        [
            [
                r.topic,
                f"{r.broker_name} (logical)" if r.logical else r.broker_name,
                r.queue_id,
                unknown_or(r, r.max_offset),
                unknown_or(r, "-" if r.consumer_offset is None else r.consumer_offset),
                unknown_or(r, r.lag),
                *([r.inflight] if pop else []),
                format_time(r.last_consume_ms),
            ]
            for r in rows
        ],
    )
    total = sum(r.lag for r in rows)
    blind = sum(1 for r in rows if r.no_master)
    unknown = f"; {blind} without figures, see the notes" if blind else ""
    lines = [
        f"Consumer group: {group}",
        body,
        f"Total lag: {total} ({len(rows)} queues{unknown})",
    ]
    return "\n".join([*lines, *(f"Note: {n}" for n in notes)])


def groups_table(totals: dict[str, tuple[int, int]], notes: Sequence[str]) -> str:
    body = table(["Group", "Queues", "Total Lag"], [[g, q, lag] for g, (lag, q) in totals.items()])
    return "\n".join([body, *(f"Note: {n}" for n in notes)])


def _failures(answers: Sequence[BrokerAnswer]) -> list[str]:
    return [a.error for a in answers if a.error is not None]


@click.command(
    "consumerProgress", short_help="A consumer group's lag per queue (every group without -g)."
)
@addresses_option
@click.option("-g", "--group", default=None, metavar="GROUP", help="Consumer group.")
@click.option("-t", "--topic", default=None, metavar="TOPIC", help="Only this topic.")
@pass_settings
def consumer_progress(
    settings: Settings, addresses: str, group: str | None, topic: str | None
) -> None:
    """Show how far behind a consumer group is: per topic and queue, the broker group, the
    queue's max offset, the group's committed offset, the lag and the last consume time; then
    the group's total lag. Without -g: every group with its total lag.

    Max offset is what a consumer can read: in controller mode the queue offset after the last
    message every in-sync replica has (the confirm offset), so a group that consumed all it can
    read has lag 0. Lag is max offset minus committed offset (from the queue's min offset when
    the group never committed there). The last consume time is when the group last moved its
    committed offset on that queue. For a POP group (docs/pop.md) the committed offset is its
    POP offset, and an "In Flight" column shows the messages handed out and not yet acked or
    redelivered (the master's figure; --json: popInflight). Each broker group is asked at its
    master, or at a slave
    when it has none (a note says so). Exit status 1 for an unknown group, or when a broker
    group could not be asked (the others' figures are printed first).

    The queues of a broker group with no master where no slave could be asked either are listed
    from the topic's route with "?" for their figures and a note saying why (--json: "noMaster":
    true, offsets and lag null); the total leaves them out and the exit status is 1. When no
    broker at all is registered with the controllers, only the routes are left: with -g and -t
    the topic's queues are listed that way; with -g alone (the topics a group consumes are
    known only to its brokers) or without -g, one line says so, exit status 1.

    A static topic (docs/static-topics.md) shows one row per logical queue, its broker name the
    group of the queue's newest item marked "(logical)": max offset, consumer offset and lag are
    logical, across every item of the queue (--json: "logical": true).

    After a broker's restart its ConsumeQueues open when first read, and one request opens at
    most 128 of them (more held its event loop for seconds): the topics it left out are not in
    the figures, a note names them and the exit status is 1; run the command again for them
    (--json: "notOpened": [{"brokerName", "group", "topic"}]).

    Prints {"group", "topic", "queues": [{"group", "topic", "brokerName", "queueId",
    "maxOffset", "consumerOffset", "lag", "lastConsumeMs", "popInflight", "logical",
    "noMaster"}],
    "totalLag", "notes", "notOpened"}; without -g
    {"groups": [{"group", "queues", "totalLag"}], "notes", "notOpened"}.
    """

    async def work() -> tuple[
        list[BrokerAnswer], dict[str, tuple[LogicalQueue, ...]], dict[str, list[MessageQueue]]
    ]:
        async with ProgressAdmin(addresses) as admin:
            try:
                answers = await admin.consume_stats(group, topic)
            except NoBrokerRegistered:
                answers = []  # the controllers may still route the topic: its queues are listed
            topics = {
                q.topic for a in answers if a.stats for qs in a.stats.groups.values() for q in qs
            }
            # With -g: the routes say which queues live on broker groups that did not answer.
            wanted = topics | ({topic} if topic else set())
            routed = await admin.queues(sorted(wanted)) if group is not None else {}
            return answers, await admin.mappings(topics), routed

    answers, mappings, routed = run(work())
    failures = _failures(answers)
    if not any(a.stats is not None for a in answers) and (group is None or topic is None):
        # No broker group answered, and no topic was named: nothing tells which queues to list.
        if answers:
            raise CommandError("; ".join(failures))
        if group is None:
            raise CommandError(
                f"{NO_BROKER_REGISTERED}: the consumer groups and their offsets are known only "
                "to the brokers"
            )
        raise CommandError(
            f"{NO_BROKER_REGISTERED}: the topics consumer group {group!r} consumes, and its "
            "offsets, are known only to its brokers; -t TOPIC lists a topic's queues from its "
            "route, without figures"
        )
    rows = logical_rows(progress_rows(answers), mappings)
    left = not_opened(answers)
    notes = source_notes(answers) + not_opened_notes(left)
    if group is not None:
        answered = {a.target.broker_name for a in answers if a.stats is not None}
        errors = {a.target.broker_name: a.error for a in answers if a.error is not None}
        blind, more = masterless_rows(group, routed, answered, errors)
        rows = sorted([*rows, *blind], key=lambda r: (r.group, r.topic, r.broker_name, r.queue_id))
        notes = [*notes, *more]
        failures += [
            f"broker group {name}: none of its brokers is registered with the controllers"
            for name in sorted({r.broker_name for r in blind} - set(errors))
        ]
    if not answers and not rows:
        # -g and -t, and the controllers do not route the topic to a broker group either.
        raise CommandError(
            f"{NO_BROKER_REGISTERED}, and their routes give no queue of topic {topic!r} to list"
        )
    if group is None:
        totals = group_totals(rows)
        doc: dict[str, Any] = {
            "groups": [
                {"group": g, "queues": q, "totalLag": lag} for g, (lag, q) in totals.items()
            ],
            "notes": notes,
            "notOpened": left,
        }
        emit(settings, doc, lambda: groups_table(totals, notes))
    elif not rows and not failures and not left:
        if topic:
            raise CommandError(
                f"consumer group {group!r} has no offsets or members for topic {topic!r} on any "
                "broker group"
            )
        raise CommandError(
            f"consumer group {group!r} has no offsets or members on any broker group (a group "
            "made with updateSubGroup shows here once it commits an offset; getSubGroup shows "
            "its settings)"
        )
    else:
        doc = {
            "group": group,
            "topic": topic,
            "queues": [r.to_dict() for r in rows],
            "totalLag": sum(r.lag for r in rows),
            "notes": notes,
            "notOpened": left,
        }
        emit(settings, doc, lambda: progress_table(group, rows, notes))
    problems = ["not every broker group answered: " + "; ".join(failures)] if failures else []
    if left:
        problems.append(
            f"{len(left)} group and topic pair(s) not read yet (ConsumeQueues not opened since "
            "a broker's start): run the command again"
        )
    if problems:
        raise CommandError("; ".join(problems))


def queue_ranges(queues: Sequence[MessageQueue]) -> str:
    """``broker-a:0-3, broker-b:5`` for a sorted queue list (a static topic's logical queues:
    ``logical:0-3``); ``-`` when empty."""
    if not queues:
        return "-"
    parts: list[str] = []
    by_broker: dict[str, list[int]] = {}
    for q in queues:
        by_broker.setdefault(q.broker_name, []).append(q.queue_id)
    for broker, ids in sorted(by_broker.items()):
        ids.sort()
        spans: list[str] = []
        start = prev = ids[0]
        for qid in [*ids[1:], None]:
            if qid is not None and qid == prev + 1:
                prev = qid
                continue
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            if qid is not None:
                start = prev = qid
        label = "logical" if broker == LOGICAL_BROKER else broker
        parts.append(f"{label}:{','.join(spans)}")
    return ", ".join(parts)


POP_QUEUES = "POP: every queue"
"""What consumerConnection shows for a POP member's queues: it holds none and reads them all."""


def connection_table(
    group: str, members: Sequence[Member], held: dict[str, list[MessageQueue]]
) -> str:
    body = table(
        [
            "Client Id",
            "Address",
            "Language",
            "Version",
            "Protocol",
            "Consume",
            "Topic",
            "Last Heartbeat (UTC)",
            "Queues",
        ],
        [
            [
                m.client_id,
                m.address,
                m.language or "-",
                m.version or "-",
                m.protocol or "-",
                m.consume_type or "-",
                m.topic,
                format_time(m.last_heartbeat_ms),
                POP_QUEUES if m.pops else queue_ranges(held.get(m.client_id, [])),
            ]
            for m in members
        ],
    )
    return f"Consumer group: {group}\n{body}"


@click.command("consumerConnection", short_help="A consumer group's live members and their queues.")
@addresses_option
@group_option
@pass_settings
def consumer_connection(settings: Settings, addresses: str, group: str) -> None:
    """List a consumer group's live members (client id, address, language, version, protocol,
    consume type, subscribed topic, last heartbeat) as the broker groups see them, and the
    queues each holds.
    The protocol says how the member reaches the brokers: remoting (this SDK), gRPC (the
    official RocketMQ 5 clients, through a broker's gRPC port; the address is the client's as
    that port saw it) or classic (RocketMQ's remoting clients; the version is RocketMQ's
    MQVersion ordinal, e.g. 401 for 4.9.4); language and version are what the client said
    ("-" when a broker of an earlier version does not tell).

    The consume type is what the member said in its heartbeats: pop (this SDK's SimpleConsumer
    and Consumer(pop=True), the official clients' SimpleConsumer and PushConsumer, a classic
    CONSUME_POP consumer), push (this SDK's Consumer, a classic CONSUME_PASSIVELY consumer) or
    pull (CONSUME_ACTIVELY); "-" when it did not say (an older client, or a broker of an earlier
    version), taken as push or pull. A POP member holds no queue: every POP member reads every
    queue of its topic, shown as "POP: every queue".

    Brokers know the members but not who holds which queue: the queues of the other members are
    computed here the way each computes its own share (the averaging allocation over the sorted
    ids of the group's members that are not POP and the topic's sorted queues). Right after a
    member joins or leaves, members that have not rebalanced yet may still hold their old queues
    for up to a heartbeat interval. Exit status 1 when the group has no live member.

    Prints {"group", "members": [{"clientId", "address", "language", "version", "protocol",
    "consumeType", "topic", "lastHeartbeatMs", "brokers", "queues": [{"brokerName",
    "queueId"}]}]} (a POP member: "consumeType" "pop" and "queues" empty).
    """

    async def work() -> tuple[list[Member], dict[str, list[MessageQueue]], dict[str, str]]:
        async with ProgressAdmin(addresses) as admin:
            members, errors = await admin.members(group)
            if not members:
                return members, {}, errors
            queues = await admin.queues([m.topic for m in members])
            return members, allocation(members, queues), errors

    members, held, errors = run(work())
    if not members:
        why = f" (not asked: {'; '.join(errors.values())})" if errors else ""
        raise CommandError(f"consumer group {group!r} has no live member{why}")
    doc = {
        "group": group,
        "members": [
            {
                "clientId": m.client_id,
                "address": m.address,
                "language": m.language,
                "version": m.version,
                "protocol": m.protocol,
                "consumeType": m.consume_type,
                "topic": m.topic,
                "lastHeartbeatMs": m.last_heartbeat_ms,
                "brokers": list(m.brokers),
                "queues": [
                    {"brokerName": q.broker_name, "queueId": q.queue_id}
                    for q in held.get(m.client_id, [])
                ],
            }
            for m in members
        ],
    }
    emit(settings, doc, lambda: connection_table(group, members, held))
    if errors:
        raise CommandError("not every broker group answered: " + "; ".join(errors.values()))


def merge_producers(
    brokers: Sequence[BrokerRef], answers: Sequence[ProducerConnections | str]
) -> list[dict[str, Any]]:
    """Every broker's list merged into one entry per client id (its latest heartbeat), with
    the brokers that list it; sorted by client id."""
    latest: dict[str, ProducerConnection] = {}
    seen: dict[str, list[str]] = {}
    for ref, answer in zip(brokers, answers, strict=True):
        if isinstance(answer, str):
            continue
        for p in answer.producers:
            seen.setdefault(p.client_id, []).append(ref.address)
            if (
                p.client_id not in latest
                or p.last_heartbeat_ms > latest[p.client_id].last_heartbeat_ms
            ):
                latest[p.client_id] = p
    return [latest[cid].to_wire() | {"brokers": sorted(seen[cid])} for cid in sorted(latest)]


@click.command("producerConnection", short_help="A producer group's live clients.")
@addresses_option
@click.option("-g", "--group", required=True, metavar="GROUP", help="Producer group.")
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="A topic it sends to.")
@pass_settings
def producer_connection(settings: Settings, addresses: str, group: str, topic: str) -> None:
    """List a producer group's live clients (client id, address, language, version, protocol,
    last heartbeat) as the brokers of TOPIC (masters and slaves) see them.

    A producer is listed while it heart-beats with its group: this SDK's transactional
    producers (remoting), RocketMQ's classic clients (classic: every producer group they run;
    the version is RocketMQ's MQVersion ordinal) and the transactional producers of a broker's
    gRPC port (gRPC: one entry per gRPC port, its relay, since the official clients' producers
    have no group). This SDK's plain producers send no heartbeat and are not listed. Exit
    status 1 when the group has no live client on those brokers, or the topic is unknown.

    Prints {"group", "topic", "producers": [{"clientId", "address", "language", "version",
    "protocol", "lastHeartbeatMs", "brokers"}]}.
    """

    async def work() -> tuple[list[BrokerRef], list[ProducerConnections | str]]:
        async with Admin(addresses) as admin:
            route = await admin.topic_route(topic)
        brokers = [
            BrokerRef(address, b.broker_name)
            for b in route.brokers
            for address in ([b.master_address] if b.master_address else []) + list(b.slaves)
        ]
        ask = ProducerConnectionsQuery(group=group)

        def read(resp: Frame) -> ProducerConnections:
            return ProducerConnections.parse(resp.header, resp.body)

        return brokers, await ask_each(brokers, ask.code, *ask.encode(), read)

    brokers, answers = run(work())
    producers = merge_producers(brokers, answers)
    failed = failures(brokers, answers)
    if not producers:
        why = f" (not asked: {'; '.join(failed)})" if failed else ""
        raise CommandError(
            f"producer group {group!r} has no live client on the brokers of {topic!r}{why}"
        )
    rows = [
        [p["clientId"], p["address"], p["language"] or "-", p["version"] or "-",
         p["protocol"] or "-", format_time(p["lastHeartbeatMs"])]
        for p in producers
    ]  # fmt: skip
    headers = ["Client Id", "Address", "Language", "Version", "Protocol", "Last Heartbeat (UTC)"]
    doc = {"group": group, "topic": topic, "producers": producers}
    emit(settings, doc, lambda: f"Producer group: {group}\n{table(headers, rows)}")
    if failed:
        raise CommandError("not every broker answered: " + "; ".join(failed))
