"""Cluster commands: clusterList."""

from __future__ import annotations

import click

from client.admin import Admin
from client.routes import ClusterBroker
from rmqctl.common import Settings, addresses_option, emit, pass_settings, run, table


@click.command("clusterList", short_help="List the brokers of every cluster.")
@addresses_option
@pass_settings
def cluster_list(settings: Settings, addresses: str) -> None:
    """List every cluster's brokers: name, id, address and role.

    Prints {"clusters": {name: [{"brokerName", "brokerId", "address", "role"}]}}.
    """

    async def work() -> dict[str, list[ClusterBroker]]:
        async with Admin(addresses) as admin:
            return await admin.cluster_info()

    clusters = run(work())
    doc = {"clusters": {name: [b.to_dict() for b in bs] for name, bs in clusters.items()}}
    rows = [
        [name, b.broker_name, b.broker_id, b.address, b.role]
        for name in sorted(clusters)
        for b in sorted(clusters[name], key=lambda b: (b.broker_name, b.broker_id))
    ]
    emit(settings, doc, lambda: table(["Cluster", "Broker Name", "BID", "Address", "Role"], rows))
