"""Traffic and re-balancing: brokerTraffic, rebalancePlan, rebalanceApply (docs/operations.md,
"Adding a broker group and re-balancing").

The figures are the brokers' own counters, which the active controller hears with every
heartbeat; the plan is computed there (:mod:`controller.metadata.rebalance`), or, with
``--from``, taken from the ``rmq-pipeline traffic`` job's plan. A plan moves logical queues of
static topics, one REMAP_STATIC_TOPIC each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from client.errors import BrokerError, ClientError
from protocol.codes import ResponseCode
from protocol.controller_requests.groups import GetReplicaInfo
from protocol.controller_requests.rebalance import RebalancePlanQuery, TrafficQuery
from protocol.controller_requests.static_topics import StaticTopicMappingQuery
from protocol.controller_requests.topics import RouteQuery
from protocol.rebalance import PlanError, plan_from_job
from rmqctl.common import (
    CommandError,
    Settings,
    addresses_option,
    emit,
    pass_settings,
    run,
    table,
)
from rmqctl.controller_calls import answer_body, call_controllers
from rmqctl.static_topic import apply_moves, read_json_file


def _doc(raw: Any, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ClientError(f"malformed {what} answer")
    return raw


def _rate(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


@click.command("brokerTraffic", short_help="Show messages put per second per broker group.")
@addresses_option
@pass_settings
def broker_traffic(settings: Settings, addresses: str) -> None:
    """Show each broker group's traffic as the active controller heard it with the brokers'
    heartbeats: messages put per second over the brokers' traffic window, in all and for their
    busiest topics, per queue. A group whose master the active controller has not heard since
    it became active shows "heard": false and Msg/s "unknown" (placement leaves it out).

    Prints {"groups": [{"brokerName", "master", "heard", "msgPerSec", "windowMs", "topics":
    {topic: {"msgPerSec", "queues": {queueId: msgPerSec}}}}]}.
    """

    async def work() -> dict[str, Any]:
        ask = TrafficQuery()
        resp = await call_controllers(addresses, ask.code, *ask.encode())
        return _doc(answer_body(resp, "traffic"), "traffic")

    doc = run(work())

    def human() -> str:
        rows: list[list[object]] = []
        for g in doc.get("groups", []):
            rate = g["msgPerSec"] if g.get("heard", True) else "unknown"
            rows.append([g["brokerName"], "yes" if g["master"] else "no", rate, "", ""])
            for topic, t in g["topics"].items():
                rows.append(["", "", "", topic, t["msgPerSec"]])
        return table(["Broker Name", "Master", "Msg/s", "Topic", "Topic Msg/s"], rows)

    emit(settings, doc, human)


def _plan_human(doc: Mapping[str, Any]) -> str:
    lines = [
        f"Rate: {doc['rate']}, threshold {doc['threshold']:g}",
        "Groups: "
        + ", ".join(
            f"{g} {before:g} -> {doc['groupsAfter'].get(g, before):g}"
            for g, before in doc["groupsBefore"].items()
        ),
        f"Spread: {doc['spreadBefore']:g} -> {doc['spreadAfter']:g}",
    ]
    if doc.get("reason"):
        lines.append(f"Note: {doc['reason']}")
    moves = doc["moves"]
    if moves:
        lines.append(
            table(
                ["Topic", "Queue", "From", "To", "Msg/s"],
                [
                    [m["topic"], m["queue"], m["from"], m["to"], _rate(m["msgPerSec"])]
                    for m in moves
                ],
            )
        )
    else:
        lines.append("No queue to move.")
    if doc.get("unmovable"):
        lines.append("Cannot move (ordinary topics):")
        lines.append(
            table(
                ["Topic", "Broker Name", "Msg/s", "Why"],
                [
                    [u["topic"], u["brokerName"], _rate(u["msgPerSec"]), u["reason"]]
                    for u in doc["unmovable"]
                ],
            )
        )
    return "\n".join(lines)


async def _topic_kind(addresses: str, topic: str) -> list[str | None] | None:
    """Per logical queue the group of its newest item (None: moving) for a static topic; None
    for an ordinary topic; ClientError "topic T does not exist" for neither."""
    try:
        mapping = StaticTopicMappingQuery(topic=topic)
        resp = await call_controllers(addresses, mapping.code, *mapping.encode())
    except BrokerError as exc:
        if exc.code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        try:
            route = RouteQuery(topic=topic)
            await call_controllers(addresses, route.code, *route.encode())
        except BrokerError as missing:
            if missing.code == ResponseCode.TOPIC_NOT_EXIST:
                raise ClientError(f"topic {topic} does not exist") from None
            raise
        return None
    doc = answer_body(resp, "static topic mapping")
    try:
        return [
            None if q["items"][-1]["logicalEnd"] is not None else q["items"][-1]["brokerName"]
            for q in doc["queues"]
        ]
    except (KeyError, IndexError, TypeError):
        raise ClientError("malformed static topic mapping answer") from None


@click.command(
    "rebalancePlan", short_help="Show which static topic queues to move to even out traffic."
)
@addresses_option
@click.option(
    "--threshold",
    type=click.FloatRange(min=0),
    default=None,
    metavar="MSG_PER_SEC",
    help="Balanced when the busiest and idlest groups differ by at most this (default: the "
    "controllers' rebalance_threshold).",
)
@click.option(
    "--from",
    "from_file",
    default=None,
    metavar="FILE",
    help="Take the plan of the rmq-pipeline traffic job (its plan.json, or the JSON document "
    "it prints) instead of the live counters.",
)
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="FILE",
    help="Also write the plan (JSON) to FILE, for rebalanceApply --plan.",
)
@pass_settings
def rebalance_plan(
    settings: Settings,
    addresses: str,
    threshold: float | None,
    from_file: str | None,
    output: str | None,
) -> None:
    """Show the re-balance plan: logical queues of static topics to move from the busiest broker
    groups to the idlest, with the traffic figures before and after.

    By default from live figures: messages put per second over the brokers' traffic window, as
    the active controller heard them with the heartbeats. Nothing moves while the busiest and
    the idlest group (of those with a master) differ by at most the threshold; past it, queues
    move one by one from the busiest group to the idlest, each the queue whose rate evens the
    two out best, until the spread is within the threshold. Ordinary topics cannot move: those
    on the busiest group are listed as such. With --from the plan is the traffic job's (topics
    moved whole by peak hourly rate): each of its topic moves becomes the moves of that static
    topic's queues not on the target yet.

    Prints {"rebalance", "reason", "threshold", "rate", "spreadBefore", "groupsBefore",
    "spreadAfter", "groupsAfter", "moves": [{"topic", "queue", "from", "to", "msgPerSec"}],
    "unmovable": [{"topic", "brokerName", "msgPerSec", "reason"}]}. Changes nothing.
    """
    if from_file is not None and threshold is not None:
        raise click.UsageError(
            "--threshold applies to the live figures; the traffic job's plan has its own "
            "(rmq-pipeline traffic --threshold)"
        )
    job = read_json_file(from_file, "traffic job plan") if from_file is not None else None

    async def live() -> dict[str, Any]:
        ask = RebalancePlanQuery(threshold=threshold)
        resp = await call_controllers(addresses, ask.code, *ask.encode())
        return _doc(answer_body(resp, "re-balance plan"), "re-balance plan")

    async def from_job() -> dict[str, Any]:
        moves = job.get("moves") if isinstance(job, dict) else None
        topics = sorted(
            {m["topic"] for m in moves if isinstance(m, dict) and isinstance(m.get("topic"), str)}
            if isinstance(moves, list)
            else set()
        )
        static: dict[str, list[str | None]] = {}
        ordinary: set[str] = set()
        for topic in topics:
            kind = await _topic_kind(addresses, topic)
            if kind is None:
                ordinary.add(topic)
            else:
                static[topic] = kind
        try:
            return plan_from_job(job, static, frozenset(ordinary)).doc()
        except PlanError as exc:
            raise CommandError(f"{from_file}: {exc}") from None

    doc = run(from_job() if from_file is not None else live())
    if output is not None:
        try:
            Path(output).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc}") from None
    emit(settings, doc, lambda: _plan_human(doc))


Move = tuple[str, int, str, str]
"""(topic, logical queue, from group, to group)."""


def read_moves(path: str) -> list[Move]:
    """The moves of a rebalancePlan document; CommandError (one line) when it is not one."""
    doc = read_json_file(path, "plan")
    if not isinstance(doc, dict) or not isinstance(doc.get("moves"), list):
        raise CommandError(
            f'plan {path} must be a rebalancePlan document (a JSON object with "moves")'
        )
    moves: list[Move] = []
    seen: set[tuple[str, int]] = set()
    for n, entry in enumerate(doc["moves"], 1):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and type(entry.get("queue")) is int
            and isinstance(entry.get("from"), str)
            and isinstance(entry.get("to"), str)
        )
        if not ok:
            raise CommandError(
                f'plan {path}: move {n} must have "topic": str, "queue": int, "from": str, '
                f'"to": str, not {json.dumps(entry)}'
            )
        key = (entry["topic"], entry["queue"])
        if key in seen:
            raise CommandError(f"plan {path}: move {n} moves {key[0]} queue {key[1]} again")
        seen.add(key)
        moves.append((entry["topic"], entry["queue"], entry["from"], entry["to"]))
    return moves


async def check_moves(addresses: str, moves: Sequence[Move]) -> None:
    """Every move of the plan against the controllers' state, before any is sent: the topic is
    static, the queue exists and is where the plan found it, the target group exists."""
    mappings: dict[str, list[str | None] | None] = {}
    groups: dict[str, bool] = {}
    for n, (topic, queue, source, target) in enumerate(moves, 1):
        where = f"plan move {n} ({topic} queue {queue} -> {target})"
        if topic not in mappings:
            try:
                mappings[topic] = await _topic_kind(addresses, topic)
            except BrokerError:
                raise
            except ClientError as exc:
                raise ClientError(f"{where}: {exc}") from None
        queues = mappings[topic]
        if queues is None:
            raise ClientError(f"{where}: {topic} is not a static topic (its queues cannot move)")
        if not 0 <= queue < len(queues):
            raise ClientError(f"{where}: static topic {topic} has queues 0 to {len(queues) - 1}")
        if queues[queue] is None:
            raise ClientError(f"{where}: a move of {topic} queue {queue} is in progress")
        if queues[queue] != source:
            raise ClientError(
                f"{where}: the queue is on {queues[queue]} now, not {source} (the plan is "
                "stale: compute it again)"
            )
        if target not in groups:
            try:
                ask = GetReplicaInfo(broker_name=target)
                await call_controllers(addresses, ask.code, *ask.encode())
                groups[target] = True
            except BrokerError as exc:
                if exc.code != ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                    raise
                groups[target] = False
        if not groups[target]:
            raise ClientError(f"{where}: broker group {target} does not exist")


@click.command("rebalanceApply", short_help="Apply a rebalancePlan: move its queues one by one.")
@addresses_option
@click.option(
    "--plan",
    "plan_file",
    required=True,
    metavar="FILE",
    help="A plan as rebalancePlan prints it with --json (or writes with --output).",
)
@pass_settings
def rebalance_apply(settings: Settings, addresses: str, plan_file: str) -> None:
    """Apply a re-balance plan: each of its moves is one remapStaticTopic (fence the queue on
    its group's master, seal it, continue it on the target group), one at a time, in order.

    The whole plan is checked first, and refused with one line before anything moves: a file
    that is not a plan, an unknown topic, an ordinary topic, a queue out of range or no longer
    on the group the plan found it on (a stale plan), an unknown group. Then the first refused
    move stops the command (`move N of M (...) refused after K applied: ...`); the moves before
    it stay done. Needs a super user when authentication is on.

    Prints {"applied": N, "moves": [{"topic", "queue", "from", "to"}]}.
    """
    moves = read_moves(plan_file)

    async def work() -> int:
        await check_moves(addresses, moves)
        await apply_moves(addresses, [(t, q, target) for t, q, _, target in moves])
        return len(moves)

    applied = run(work())
    doc = {
        "applied": applied,
        "moves": [{"topic": t, "queue": q, "from": s, "to": d} for t, q, s, d in moves],
    }
    emit(
        settings,
        doc,
        lambda: (
            f"Applied {applied} moves.\n"
            + table(["Topic", "Queue", "From", "To"], [list(m) for m in moves])
            if moves
            else "Nothing to apply: the plan has no moves."
        ),
    )
