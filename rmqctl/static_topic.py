"""Static topic commands: updateStaticTopic, staticTopicMapping (docs/static-topics.md).

Both talk to the controllers (following CONTROLLER_NOT_LEADER to the leader); a static topic's
logical queues and their mapping items live in the controllers' replicated state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from client.errors import ClientError
from protocol.codes import ControllerCode
from protocol.remoting import Scalar
from rmqctl.common import Settings, addresses_option, emit, pass_settings, run, table
from rmqctl.controller_calls import answer_body, call_controllers

topic_option = click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")


def _mapping(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not isinstance(raw.get("queues"), list):
        raise ClientError("malformed static topic mapping")
    return raw


def _mapping_human(doc: Mapping[str, Any]) -> str:
    rows = [
        [
            q["queueId"],
            i["generation"],
            i["brokerName"],
            i["physicalQueue"],
            i["logicalStart"],
            "open" if i["logicalEnd"] is None else i["logicalEnd"],
            i["physicalStart"],
        ]
        for q in doc["queues"]
        for i in q["items"]
    ]
    return f"Static topic: {doc['topic']}\n" + table(
        [
            "Queue",
            "Gen",
            "Broker Name",
            "Physical Queue",
            "Logical Start",
            "Logical End",
            "Physical Start",
        ],
        rows,
    )


@click.command(
    "updateStaticTopic", short_help="Create a static topic: logical queues mapped to groups."
)
@addresses_option
@topic_option
@click.option(
    "-q",
    "--queues",
    type=click.IntRange(1, 1024),
    required=True,
    metavar="N",
    help="Logical queues of the topic.",
)
@click.option(
    "-b",
    "--broker-names",
    default="",
    metavar="NAMES",
    help="Broker groups to spread the queues over, ';'-separated (default: every group with "
    "a master).",
)
@pass_settings
def update_static_topic(
    settings: Settings, addresses: str, topic: str, queues: int, broker_names: str
) -> None:
    """Create a static topic of N logical queues, spread round-robin over the broker groups; each
    queue starts as one mapping item (group, physical queue) at logical offset 0. Asking again
    with the same N changes nothing; another N, an ordinary topic of that name, or an unknown
    group is refused.

    Prints the staticTopicMapping document.
    """

    async def work() -> dict[str, Any]:
        header: dict[str, Scalar] = {"topic": topic, "queues": queues}
        if broker_names:
            header["brokerNames"] = broker_names
        resp = await call_controllers(
            addresses, ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC, header
        )
        return _mapping(answer_body(resp, "static topic"))

    doc = run(work())
    emit(settings, doc, lambda: _mapping_human(doc))


@click.command("staticTopicMapping", short_help="Show a static topic's logical queues and items.")
@addresses_option
@topic_option
@pass_settings
def static_topic_mapping(settings: Settings, addresses: str, topic: str) -> None:
    """Show each logical queue of a static topic and its mapping items, oldest first.

    Prints {"topic", "queues": [{"queueId", "items": [{"brokerName", "physicalQueue",
    "logicalStart", "physicalStart", "generation", "logicalEnd" (null while open)}]}]}.
    """

    async def work() -> dict[str, Any]:
        resp = await call_controllers(
            addresses, ControllerCode.GET_STATIC_TOPIC_MAPPING, {"topic": topic}
        )
        return _mapping(answer_body(resp, "static topic mapping"))

    doc = run(work())
    emit(settings, doc, lambda: _mapping_human(doc))
