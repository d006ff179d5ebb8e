"""Topic commands: updateTopic, topicRoute."""

from __future__ import annotations

import click

from client.admin import Admin
from client.routes import TopicRoute
from rmqctl.common import Settings, addresses_option, emit, pass_settings, run, table


@click.command("updateTopic", short_help="Create or update a topic on the master brokers.")
@addresses_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
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
@pass_settings
def update_topic(
    settings: Settings, addresses: str, topic: str, queues: int, cluster: str | None
) -> None:
    """Create or update a topic on every master broker (of one cluster with -c).

    Prints {"topic", "queues", "brokers": [names]}.
    """

    async def work() -> list[str]:
        async with Admin(addresses) as admin:
            return await admin.create_topic(topic, queues, cluster)

    brokers = run(work())
    doc = {"topic": topic, "queues": queues, "brokers": brokers}
    emit(
        settings,
        doc,
        lambda: table(["Topic", "Queues", "Brokers"], [[topic, queues, ", ".join(brokers)]]),
    )


@click.command("topicRoute", short_help="Show a topic's broker groups, masters and queues.")
@addresses_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@pass_settings
def topic_route(settings: Settings, addresses: str, topic: str) -> None:
    """Show which broker groups hold a topic, their masters, slaves and queue counts.

    Prints {"topic", "brokers": [{"brokerName", "masterAddress", "slaves", "queues"}]}.
    """

    async def work() -> TopicRoute:
        async with Admin(addresses) as admin:
            return await admin.topic_route(topic)

    route = run(work())
    emit(settings, route.to_dict(), lambda: _route_table(route))


def _route_table(route: TopicRoute) -> str:
    rows = [
        [b.broker_name, b.master_address or "-", ", ".join(b.slaves) or "-", b.queues]
        for b in route.brokers
    ]
    return f"Topic: {route.topic}\n" + table(["Broker Name", "Master", "Slaves", "Queues"], rows)
