"""Topic commands: updateTopic, topicRoute."""

from __future__ import annotations

import click

from client.admin import Admin
from client.errors import ClientError
from client.routes import TopicRoute
from protocol.controller_requests.rebalance import TrafficQuery
from protocol.controller_requests.topics import UpdateTopic
from protocol.rebalance import least_loaded
from protocol.topic_attrs import (
    ATTR_MESSAGE_TYPE,
    MessageType,
    parse_attributes,
    parse_perm,
    perm_text,
)
from rmqctl.common import (
    Settings,
    addresses_option,
    emit,
    pass_settings,
    run,
    table,
    topic_option,
)
from rmqctl.controller_calls import answer_body, call_controllers


@click.command("updateTopic", short_help="Create or update a topic on the master brokers.")
@addresses_option
@topic_option
@click.option(
    "-q",
    "--queues",
    type=click.IntRange(1, 1024),
    default=8,
    show_default=True,
    metavar="N",
    help="Queues per broker group.",
)
@click.option(
    "-c",
    "--cluster",
    default=None,
    metavar="CLUSTER",
    help="Create on this cluster's masters only (default: every cluster).",
)
@click.option(
    "-g",
    "--groups",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Create on the N broker groups with a master and the least recent traffic (messages "
    "put per second, from the brokers' heartbeats) instead.",
)
@click.option(
    "-p",
    "--perm",
    default=None,
    metavar="PERM",
    help="Permission, as mqadmin's: 6 read and write (a new topic's), 4 read only (sends "
    "refused), 2 write only (pulls and POPs refused); left out: keep the topic's.",
)
@click.option(
    "--attributes",
    default=None,
    metavar="ATTRS",
    help="Attributes, as mqadmin's -a (here -a is the addresses): "
    "+message.type=NORMAL|FIFO|DELAY|TRANSACTION|MIXED (a new topic's NORMAL); left out: keep "
    "the topic's.",
)
@click.option(
    "-o",
    "--order",
    type=bool,
    default=None,
    metavar="BOOL",
    help="mqadmin's order flag: true is +message.type=FIFO.",
)
@pass_settings
def update_topic(
    settings: Settings,
    addresses: str,
    topic: str,
    queues: int,
    cluster: str | None,
    groups: int | None,
    perm: str | None,
    attributes: str | None,
    order: bool | None,
) -> None:
    """Create or update a topic on every master broker (of one cluster with -c), or with -g N
    on the N broker groups with the least recent traffic (placement by traffic); with -p its
    permission, with --attributes (or -o true) its message type (docs/operations.md, "Topic types and
    permissions").

    Prints {"topic", "queues", "brokers": [names]} (and "perm", "messageType" when given).
    """
    if groups is not None and cluster is not None:
        raise click.UsageError("give -c CLUSTER or -g N, not both")
    try:
        perm_bits = None if perm is None else parse_perm(perm)
        kind = parse_attributes(attributes or "").get(ATTR_MESSAGE_TYPE)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if order:
        if kind not in (None, MessageType.FIFO.value):
            raise click.UsageError(f"-o true is a FIFO topic, not {kind}")
        kind = MessageType.FIFO.value

    async def work() -> list[str]:
        if groups is not None:
            return await place_topic(addresses, topic, queues, groups, perm_bits, kind)
        async with Admin(addresses) as admin:
            return await admin.create_topic(topic, queues, cluster, perm_bits, kind)

    brokers = run(work())
    doc: dict[str, object] = {"topic": topic, "queues": queues, "brokers": brokers}
    if perm_bits is not None:
        doc["perm"] = perm_bits
    if kind is not None:
        doc["messageType"] = kind
    emit(
        settings,
        doc,
        lambda: table(["Topic", "Queues", "Brokers"], [[topic, queues, ", ".join(brokers)]]),
    )


@click.command("topicRoute", short_help="Show a topic's broker groups, masters and queues.")
@addresses_option
@topic_option
@pass_settings
def topic_route(settings: Settings, addresses: str, topic: str) -> None:
    """Show which broker groups hold a topic, their masters, slaves and queue counts.

    Prints {"topic", "brokers": [{"brokerName", "masterAddress", "slaves", "queues", "perm",
    "messageType"}]}.
    """

    async def work() -> TopicRoute:
        async with Admin(addresses) as admin:
            return await admin.topic_route(topic)

    route = run(work())
    doc = route.to_dict()
    for b, shown in zip(route.brokers, doc["brokers"], strict=True):
        shown.update(perm=b.attrs.perm, messageType=b.attrs.message_type.value)
    emit(settings, doc, lambda: _route_table(route))


def _route_table(route: TopicRoute) -> str:
    rows = [
        [
            b.broker_name,
            b.master_address or "-",
            ", ".join(b.slaves) or "-",
            b.queues,
            perm_text(b.attrs.perm),
            b.attrs.message_type.value,
        ]
        for b in route.brokers
    ]
    return f"Topic: {route.topic}\n" + table(
        ["Broker Name", "Master", "Slaves", "Queues", "Perm", "Type"], rows
    )


async def place_topic(
    addresses: str,
    topic: str,
    queues: int,
    count: int,
    perm: int | None = None,
    message_type: str | None = None,
) -> list[str]:
    """Create ``topic`` on the ``count`` groups with a master and the least traffic, through
    the controllers (UPDATE_AND_CREATE_TOPIC per group, as a broker forwards it)."""
    traffic = TrafficQuery()
    resp = await call_controllers(addresses, traffic.code, *traffic.encode())
    doc = answer_body(resp, "traffic")
    try:
        groups = [g for g in doc["groups"] if g["master"]]
        # "heard": false: the active controller has not heard that master since it became
        # active, so its traffic is not known (not idle).
        silent = [str(g["brokerName"]) for g in groups if g.get("heard") is False]
        loads = {g["brokerName"]: float(g["msgPerSec"]) for g in groups if g.get("heard", True)}
    except (KeyError, TypeError, ValueError):
        raise ClientError("malformed traffic answer") from None
    if count > len(loads):
        why = (
            f"the active controller has not heard the master of {', '.join(silent)} since it "
            "became active, so their traffic is not known; try again"
            if silent
            else f"{len(loads)} have a master"
        )
        raise ClientError(f"cannot place on {count} broker groups: {why}")
    names = least_loaded(loads, count)
    for name in names:
        ask = UpdateTopic(
            topic=topic, queues=queues, broker_name=name, perm=perm, message_type=message_type
        )
        await call_controllers(addresses, ask.code, *ask.encode())
    return names
