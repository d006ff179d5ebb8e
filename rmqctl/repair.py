"""skipCorruptMessage: reads of a queue pass over a message no replica of its group can read
(issue 31; docs/operations.md, "Corrupt files"). Sent to every replica of the group, so that
whichever is master later passes over it too."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from client.bootstrap import describe_failure
from protocol.broker_requests.repair import SkipCorruptMessage
from protocol.codes import ResponseCode, code_name
from protocol.controller_requests.groups import ReplicaEntry
from remoting.client import ConnectionPool
from remoting.errors import RemotingError
from rmqctl.common import CommandError, Settings, addresses_option, emit, pass_settings, run, table
from rmqctl.controller_calls import TIMEOUT, group_replicas

__all__ = ["skip_corrupt_message"]


@click.command(
    "skipCorruptMessage",
    short_help="Let reads of a queue pass over a message no replica can read.",
)
@addresses_option
@click.option("-t", "--topic", required=True, help="The topic.")
@click.option("-q", "--queue-id", type=int, required=True, help="The queue id.")
@click.option("-o", "--offset", type=int, required=True, help="The queue offset of the message.")
@click.option(
    "-b",
    "--broker-name",
    default="broker-a",
    show_default=True,
    help="The broker group holding the queue (as the consumer's error names it).",
)
@pass_settings
def skip_corrupt_message(
    settings: Settings, addresses: str, topic: str, queue_id: int, offset: int, broker_name: str
) -> None:
    """Give up the message at queue offset OFFSET of TOPIC:QUEUE on every replica of the
    group: reads of the queue (pulls, POP, the gRPC and classic doors) pass over it from then
    on, for every consumer group, also after a restart or a failover. A replica that reads the
    message intact keeps serving it (readable). Use it only when the consumer's error says no
    replica holds an intact copy: the message is lost.

    Prints one row per replica: brokerId, address, result (skipped, readable, or the error);
    exits 1 unless at least one replica skipped it and none failed.
    """
    if queue_id < 0 or offset < 0:
        raise click.UsageError("--queue-id and --offset must be >= 0")

    async def work() -> list[dict[str, Any]]:
        replicas = await group_replicas(addresses, broker_name)
        if not replicas:
            raise CommandError(f"broker group {broker_name} has no registered replica")
        skip = SkipCorruptMessage(topic=topic, queue_id=queue_id, queue_offset=offset)
        pool = ConnectionPool(TIMEOUT)
        try:
            return list(await asyncio.gather(*(_skip(pool, r, skip) for r in replicas)))
        finally:
            pool.close()

    rows = run(work())
    emit(
        settings,
        rows,
        lambda: table(
            ["brokerId", "address", "result"],
            [[r["brokerId"], r["address"], r["result"]] for r in rows],
        ),
    )
    results = [r["result"] for r in rows]
    if "skipped" not in results or any(r not in ("skipped", "readable") for r in results):
        raise CommandError(
            f"{topic}:{queue_id} queue offset {offset} was not skipped on every replica of "
            f"{broker_name}: " + "; ".join(f"broker {r['brokerId']}: {r['result']}" for r in rows)
        )


async def _skip(
    pool: ConnectionPool, replica: ReplicaEntry, skip: SkipCorruptMessage
) -> dict[str, Any]:
    row: dict[str, Any] = {"brokerId": replica.broker_id, "address": replica.address}
    if not replica.address:
        return row | {"result": "no address registered"}
    try:
        conn = await pool.get(replica.address)
        resp = await conn.request(skip.code, *skip.encode(), timeout=TIMEOUT)
    except RemotingError as exc:
        return row | {"result": describe_failure(exc)}
    if resp.code == ResponseCode.SUCCESS:
        return row | {"result": "skipped"}
    if resp.code == ResponseCode.RECORD_READABLE:
        return row | {"result": "readable"}
    return row | {"result": f"{code_name(resp.code)}: {resp.remark}"}
