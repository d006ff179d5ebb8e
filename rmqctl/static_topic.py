"""Static topic commands: updateStaticTopic, staticTopicMapping, remapStaticTopic
(docs/static-topics.md).

They talk to the controllers (following CONTROLLER_NOT_LEADER to the leader); a static topic's
logical queues and their mapping items live in the controllers' replicated state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from client.errors import ClientError
from protocol.controller_requests.static_topics import (
    CreateStaticTopic,
    RemapStaticTopic,
    StaticTopicMappingQuery,
)
from rmqctl.common import (
    CommandError,
    Settings,
    addresses_option,
    emit,
    pass_settings,
    run,
    table,
    topic_option,
)
from rmqctl.controller_calls import TIMEOUT, answer_body, call_controllers


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
@click.option(
    "-g",
    "--groups",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Spread over the N broker groups with a master and the least recent traffic (messages "
    "put per second, from the brokers' heartbeats) instead.",
)
@pass_settings
def update_static_topic(
    settings: Settings,
    addresses: str,
    topic: str,
    queues: int,
    broker_names: str,
    groups: int | None,
) -> None:
    """Create a static topic of N logical queues, spread round-robin over the broker groups (or,
    with -g, over the least loaded ones); each queue starts as one mapping item (group, physical
    queue) at logical offset 0. Asking again with the same N changes nothing; another N, an
    ordinary topic of that name, or an unknown group is refused.

    Prints the staticTopicMapping document.
    """
    if groups is not None and broker_names:
        raise click.UsageError("give -b NAMES or -g N, not both")

    names = tuple(n for n in broker_names.split(";") if n)
    doc = run(create_static_topic(addresses, topic, queues, names, groups or 0))
    emit(settings, doc, lambda: _mapping_human(doc))


async def create_static_topic(
    addresses: str,
    topic: str,
    queues: int,
    broker_names: Sequence[str] = (),
    place_groups: int = 0,
) -> dict[str, Any]:
    """UPDATE_AND_CREATE_STATIC_TOPIC (updateStaticTopic, rmq-console): the topic's mapping
    document after it."""
    ask = CreateStaticTopic(
        topic=topic, queues=queues, broker_names=tuple(broker_names), place_groups=place_groups
    )
    resp = await call_controllers(addresses, ask.code, *ask.encode())
    return _mapping(answer_body(resp, "static topic"))


@click.command("staticTopicMapping", short_help="Show a static topic's logical queues and items.")
@addresses_option
@topic_option
@pass_settings
def static_topic_mapping(settings: Settings, addresses: str, topic: str) -> None:
    """Show each logical queue of a static topic and its mapping items, oldest first.

    Prints {"topic", "queues": [{"queueId", "items": [{"brokerName", "physicalQueue",
    "logicalStart", "physicalStart", "generation", "logicalEnd" (null while open)}]}]}.
    """

    doc = run(mapping_of(addresses, topic))
    emit(settings, doc, lambda: _mapping_human(doc))


async def mapping_of(addresses: str, topic: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    """GET_STATIC_TOPIC_MAPPING (staticTopicMapping, rmq-console): the topic's logical queues
    and their items, oldest first."""
    ask = StaticTopicMappingQuery(topic=topic)
    resp = await call_controllers(addresses, ask.code, *ask.encode(), timeout=timeout)
    return _mapping(answer_body(resp, "static topic mapping"))


Move = tuple[str, int, str]
"""(topic, logical queue, target broker group)."""


def read_json_file(path: str, what: str) -> Any:
    """The JSON document in ``path``; CommandError (one line) when it cannot be read."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CommandError(f"cannot read {what} {path}: {exc}") from None


def read_plan(path: str) -> list[Move]:
    """A plan file: a JSON list of {"topic", "queue", "target"}; CommandError (one line) when it
    is not one."""
    doc = read_json_file(path, "plan")
    if not isinstance(doc, list) or not doc:
        raise CommandError(f"plan {path} must be a non-empty JSON list of moves")
    moves: list[Move] = []
    for n, entry in enumerate(doc, 1):
        ok = (
            isinstance(entry, dict)
            and set(entry) == {"topic", "queue", "target"}
            and isinstance(entry["topic"], str)
            and type(entry["queue"]) is int
            and isinstance(entry["target"], str)
        )
        if not ok:
            raise CommandError(
                f'plan {path}: move {n} must be {{"topic": str, "queue": int, '
                f'"target": str}}, not {json.dumps(entry)}'
            )
        moves.append((entry["topic"], entry["queue"], entry["target"]))
    return moves


@click.command(
    "remapStaticTopic", short_help="Move a static topic's logical queue to another broker group."
)
@addresses_option
@click.option("-t", "--topic", default=None, metavar="TOPIC", help="Static topic name.")
@click.option(
    "-q",
    "--queue",
    type=click.IntRange(0, 1023),
    default=None,
    metavar="QUEUE",
    help="Logical queue id.",
)
@click.option("-b", "--broker-name", default=None, metavar="GROUP", help="Target broker group.")
@click.option(
    "--plan",
    "plan_file",
    default=None,
    metavar="FILE",
    help='Apply a plan instead: a JSON list of {"topic", "queue", "target"}, one move at a '
    "time, stopping at the first refusal.",
)
@pass_settings
def remap_static_topic(
    settings: Settings,
    addresses: str,
    topic: str | None,
    queue: int | None,
    broker_name: str | None,
    plan_file: str | None,
) -> None:
    """Move logical queue QUEUE of a static topic to broker group GROUP without copying data.

    The controller leader fences the queue on its current group's master (no send accepted
    there from then on; everything accepted is replicated to its SyncStateSet), then commits
    in one Raft entry the old item sealed at its max offset and a new item on GROUP starting
    at that logical offset. Producers follow the route to the new item; old messages stay
    readable where they are. Refused with one line, nothing changed: an unknown or ordinary
    topic, a queue out of range, an unknown group or one without a master, the group already
    holding the queue, a move of it in progress, or a source master that cannot be fenced.

    Prints the topic's mapping after the move (with --plan: after the last move). Needs a
    super user when authentication is on.
    """
    single = (topic, queue, broker_name)
    if plan_file is not None:
        if any(v is not None for v in single):
            raise click.UsageError("give either --plan or -t/-q/-b, not both")
        moves = read_plan(plan_file)
    elif any(v is None for v in single):
        raise click.UsageError("-t TOPIC, -q QUEUE and -b GROUP are required (or --plan FILE)")
    else:
        assert topic is not None and queue is not None and broker_name is not None
        moves = [(topic, queue, broker_name)]

    doc = run(apply_moves(addresses, moves, lone_refusal_as_is=True))
    emit(settings, doc, lambda: _mapping_human(doc))


async def apply_moves(
    addresses: str, moves: Sequence[Move], *, lone_refusal_as_is: bool = False
) -> dict[str, Any]:
    """REMAP_STATIC_TOPIC for each move, one at a time, in order; the topic's mapping after the
    last. The first refusal stops them, as ``move N of M (T queue Q -> G) refused after K
    applied: ...`` (with ``lone_refusal_as_is``, a plan of one move's refusal as it came)."""
    doc: dict[str, Any] = {}
    for n, (t, q, target) in enumerate(moves, 1):
        ask = RemapStaticTopic(topic=t, queue_id=q, broker_name=target)
        try:
            resp = await call_controllers(addresses, ask.code, *ask.encode())
            doc = _mapping(answer_body(resp, "static topic mapping"))
        except ClientError as exc:
            if lone_refusal_as_is and len(moves) == 1:
                raise
            raise ClientError(
                f"move {n} of {len(moves)} ({t} queue {q} -> {target}) refused after "
                f"{n - 1} applied: {exc}"
            ) from None
    return doc
