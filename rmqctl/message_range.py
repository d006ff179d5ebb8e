"""Messages by store time: queryMsgByTime (a topic's messages in a time range, over every broker
group and queue) and printMsg (mqadmin's: every message of each queue in a range), through
:class:`client.message_range.RangeReader`."""

from __future__ import annotations

from typing import Any

import click

from client.lookup import FoundMessage
from client.message_range import QueueMessages, RangeReader
from protocol.broker_requests.query import END_OF_TIME
from rmqctl.common import (
    CommandError,
    PastTimeType,
    Settings,
    Spinner,
    addresses_option,
    emit,
    pass_settings,
    run,
    table,
    topic_option,
    utc_iso,
)


def _range_text(begin_ms: int, end_ms: int) -> str:
    begin = utc_iso(begin_ms) if begin_ms else "the first message"
    end = utc_iso(end_ms) if end_ms != END_OF_TIME else "the last"
    return f"{begin} .. {end}"


def _check_range(begin_ms: int, end_ms: int) -> None:
    if begin_ms > end_ms:
        raise click.UsageError(f"--begin {utc_iso(begin_ms)} is after --end {utc_iso(end_ms)}")


def message_rows(found: list[FoundMessage], show_body: bool) -> str:
    """One table row per message: id, broker, queue, offset, store time, keys, tags (body)."""
    headers = ["Message ID", "Broker", "QID", "Offset", "Store Time (UTC)", "Keys", "Tags"]
    rows: list[list[object]] = []
    for m in found:
        r = m.record
        row: list[object] = [
            r.msg_id,
            m.broker_name,
            r.queue_id,
            r.queue_offset,
            utc_iso(r.store_timestamp),
            r.keys or "-",
            r.tags or "-",
        ]
        if show_body:
            row.append(r.body.decode("utf-8", errors="replace"))
        rows.append(row)
    return table([*headers, *(["Body"] if show_body else [])], rows)


@click.command("queryMsgByTime", short_help="Find a topic's messages stored in a time range.")
@addresses_option
@topic_option
@click.option(
    "-b",
    "--begin",
    "begin_ms",
    required=True,
    type=PastTimeType(),
    help=(
        "Stored at or after TIME: now, a time ago (-1h, -30m, -2d), epoch ms, ISO 8601 (UTC "
        "unless it says) or yyyy-MM-dd#HH:mm:ss:SSS."
    ),
)
@click.option(
    "-e",
    "--end",
    "end_ms",
    required=True,
    type=PastTimeType(),
    help="Stored at or before TIME (as --begin).",
)
@click.option(
    "-m",
    "--max",
    "max_num",
    type=click.IntRange(1, 100_000),
    default=2000,
    show_default=True,
    metavar="N",
    help="At most N messages in all (the oldest of the range).",
)
@click.option("--body", "show_body", is_flag=True, help="Print the bodies too.")
@pass_settings
def query_msg_by_time(
    settings: Settings,
    addresses: str,
    topic: str,
    begin_ms: int,
    end_ms: int,
    max_num: int,
    show_body: bool,
) -> None:
    """Find the messages of TOPIC stored between --begin and --end (both included), on every
    broker group of the topic (its master, else a slave) and every queue, oldest first; at
    most --max. Committed messages only.

    Each broker finds the queue offsets of the range by store time, as
    SEARCH_OFFSET_BY_TIMESTAMP does, and reads them. A static topic is read on the physical
    queues of every broker group its route names. When the range holds more than --max, the
    oldest --max are printed and a line on stderr says so (exit status 0; --json: "truncated":
    true). Finding nothing is an error (exit status 1), and so is a queue that could not be
    read (reported on stderr after what the others returned).

    Prints {"topic", "begin", "end", "messages": [...], "truncated"} with --json.
    """
    _check_range(begin_ms, end_ms)
    errors: list[str] = []

    async def work() -> tuple[list[FoundMessage], bool]:
        what = (
            f"searching every queue of {topic} for messages stored {_range_text(begin_ms, end_ms)}"
        )
        async with Spinner(what) as spinner, RangeReader(addresses) as reader:
            return await reader.by_time(
                topic,
                begin_ms,
                end_ms,
                max_num=max_num,
                errors=errors,
                progress=lambda n: spinner.say(f"{what}: {n} read"),
            )

    found, more = run(work())
    if not found:
        why = f" ({'; '.join(errors)})" if errors else ""
        raise CommandError(
            f"no message of topic {topic!r} stored {_range_text(begin_ms, end_ms)}{why}"
        )
    doc: dict[str, Any] = {
        "topic": topic,
        "begin": begin_ms,
        "end": end_ms,
        "messages": [m.to_dict(body=show_body) for m in found],
        "truncated": more,
    }
    emit(settings, doc, lambda: message_rows(found, show_body))
    if more:
        click.echo(
            f"rmqctl: more than {max_num} messages in the range: the oldest {max_num} shown "
            "(narrow the range or raise --max)",
            err=True,
        )
    if errors:
        raise CommandError("; ".join(errors))


def _queue_block(q: QueueMessages, show_body: bool) -> str:
    head = f"{q.broker_name} queue {q.queue_id}: "
    if q.error is not None:
        return head + f"not read: {q.error}"
    if not q.messages:
        return head + "no message in the range"
    first, last = q.messages[0].record.queue_offset, q.messages[-1].record.queue_offset
    lines = [head + f"{len(q.messages)} messages, offsets {first}..{last}"]
    for m in q.messages:
        r = m.record
        body = r.body.decode("utf-8", errors="replace") if show_body else "NOT PRINT BODY"
        lines.append(
            f"MSGID: {r.msg_id} offset {r.queue_offset} stored {utc_iso(r.store_timestamp)} "
            f"keys {r.keys or '-'} tags {r.tags or '-'} BODY: {body}"
        )
    if q.truncated:
        lines.append("... (more past --max)")
    return "\n".join(lines)


@click.command("printMsg", short_help="Print the messages of a topic's queues in a time range.")
@addresses_option
@topic_option
@click.option(
    "-q",
    "--queue",
    "queue_id",
    type=click.IntRange(min=0),
    default=None,
    metavar="QUEUE",
    help="Only this queue id (default: every queue).",
)
@click.option(
    "--broker",
    "broker_name",
    default=None,
    metavar="BROKER",
    help="Only this broker group's queues (default: every group of the topic).",
)
@click.option(
    "-b",
    "--begin",
    "begin_ms",
    type=PastTimeType(),
    default=None,
    help="Stored at or after TIME (as queryMsgByTime's; default: the queue's first message).",
)
@click.option(
    "-e",
    "--end",
    "end_ms",
    type=PastTimeType(),
    default=None,
    help="Stored at or before TIME (default: the queue's last committed message).",
)
@click.option(
    "-d",
    "--body/--no-body",
    "show_body",
    default=True,
    show_default=True,
    help="Print each message's body (mqadmin's -d).",
)
@click.option(
    "--max",
    "max_num",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="At most N messages per queue (default: every message of the range).",
)
@pass_settings
def print_msg(
    settings: Settings,
    addresses: str,
    topic: str,
    queue_id: int | None,
    broker_name: str | None,
    begin_ms: int | None,
    end_ms: int | None,
    show_body: bool,
    max_num: int | None,
) -> None:
    """Print the messages of TOPIC's queues (one queue with -q, one broker group's with
    --broker) stored between --begin and --end, queue by queue in offset order, as mqadmin's
    printMsg does: each message's id, queue offset, store time, keys, tags and body.

    Each queue's offsets are found by store time on its broker group (master, else a slave),
    as SEARCH_OFFSET_BY_TIMESTAMP does; committed messages only. An empty range is no error.
    A queue that could not be read is printed as such and makes the exit status 1.

    Prints {"topic", "queues": [{"brokerName", "queueId", "messages": [...], "truncated",
    "error"}]} with --json.
    """
    begin = 0 if begin_ms is None else begin_ms
    end = END_OF_TIME if end_ms is None else end_ms
    _check_range(begin, end)

    async def work() -> list[QueueMessages]:
        what = f"reading {topic}'s messages stored {_range_text(begin, end)}"
        async with Spinner(what) as spinner, RangeReader(addresses) as reader:
            return await reader.queues_by_time(
                topic,
                begin,
                end,
                broker_name=broker_name,
                queue_id=queue_id,
                limit=max_num,
                progress=lambda n: spinner.say(f"{what}: {n} read"),
            )

    queues = run(work())
    doc = {
        "topic": topic,
        "queues": [
            {
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "messages": [m.to_dict(body=show_body) for m in q.messages],
                "truncated": q.truncated,
                "error": q.error,
            }
            for q in queues
        ],
    }
    emit(settings, doc, lambda: "\n".join(_queue_block(q, show_body) for q in queues))
    failed = [q.error for q in queues if q.error is not None]
    if failed:
        raise CommandError("; ".join(dict.fromkeys(failed)))
