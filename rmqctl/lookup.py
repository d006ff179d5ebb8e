"""Message lookup commands: queryMsgById, queryMsgByUniqueKey, queryMsgByKey, queryMsgByOffset
(mqadmin's names)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from client.lookup import FoundMessage, Lookup
from rmqctl.common import (
    CommandError,
    PastTimeType,
    Settings,
    Spinner,
    addresses_option,
    emit,
    pass_settings,
    run,
    topic_option,
    utc_iso,
)

_body_option = click.option("--body", "show_body", is_flag=True, help="Print the body too.")


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def render(found: FoundMessage, show_body: bool) -> str:
    """A message as labelled lines (mqadmin's layout)."""
    r = found.record
    rows: list[tuple[str, object]] = [
        ("Message ID", r.msg_id),
        ("Topic", r.topic),
        # The name is unknown when the controllers did not answer and the store host did.
        (
            "Broker",
            f"{found.broker_name} ({found.address})" if found.broker_name else found.address,
        ),
        ("Queue ID", r.queue_id),
        ("Queue Offset", r.queue_offset),
        ("CommitLog Offset", r.physical_offset),
        ("Keys", r.keys or "-"),
        ("Tags", r.tags or "-"),
        ("Born Timestamp", _when(r.born_timestamp) if r.born_timestamp else "-"),
        ("Born Host", r.born_host),
        ("Store Timestamp", _when(r.store_timestamp)),
        ("Store Host", r.store_host),
        ("Body Size", len(r.body)),
        ("Properties", json.dumps(r.properties, sort_keys=True)),
    ]
    if show_body:
        rows.append(("Body", r.body.decode("utf-8", errors="replace")))
    return "\n".join(f"{label + ':':<18}{value}" for label, value in rows)


def _show(
    settings: Settings, found: list[FoundMessage], show_body: bool, doc: dict[str, Any]
) -> None:
    human: Callable[[], str] = lambda: "\n\n".join(render(m, show_body) for m in found)  # noqa: E731
    emit(settings, doc, human)


def _show_found(
    settings: Settings,
    found: list[FoundMessage],
    show_body: bool,
    doc: dict[str, Any],
    errors: list[str],
) -> None:
    """Show the messages of a search (under ``doc``'s "messages"), then raise the groups that
    could not be asked: found elsewhere, their messages may be missing."""
    doc["messages"] = [m.to_dict(body=show_body) for m in found]
    _show(settings, found, show_body, doc)
    if errors:
        raise CommandError("; ".join(errors))


@click.command("queryMsgById", short_help="Show the message with a message id (either form).")
@addresses_option
@click.option(
    "-i",
    "--msg-id",
    "msg_id",
    required=True,
    metavar="MSGID",
    help="Message id: the offset id, or the unique key (UNIQ_KEY) a client shows.",
)
@click.option(
    "-t",
    "--topic",
    default=None,
    metavar="TOPIC",
    help="The message's topic, for a unique key (default: search every topic).",
)
@_body_option
@pass_settings
def query_msg_by_id(
    settings: Settings, addresses: str, msg_id: str, topic: str | None, show_body: bool
) -> None:
    """Show the message with MSGID: properties, store time, store host (and body with --body).

    MSGID is either form a message has. The offset id (rmqctl's and the SDK's "Message ID", 32
    hex digits) carries the store host and CommitLog offset; when that broker is gone its
    replicas answer. The unique key is the id the client gave the message (the id the official
    RocketMQ clients show: 34 hex digits from RocketMQ 5 clients, 32 from classic ones), stored
    as its UNIQ_KEY property: it is found through the key index, in TOPIC with -t, else in every
    topic (slower); an id of the offset form not found by its offset is tried as a unique key
    too. Committed messages only. Prints the message's fields as one JSON document with --json.
    """

    async def work() -> FoundMessage:
        where = f"in {topic}" if topic else "at its store host, else in every topic"
        async with Spinner(f"looking for message {msg_id} {where}"), Lookup(addresses) as lookup:
            return await lookup.by_id(msg_id, topic)

    found = run(work())
    _show(settings, [found], show_body, found.to_dict(body=show_body))


@click.command("queryMsgByUniqueKey", short_help="Show a topic's messages with a unique key.")
@addresses_option
@click.option(
    "-i",
    "--msg-id",
    "msg_id",
    required=True,
    metavar="MSGID",
    help="The unique key (UNIQ_KEY): the message id a client shows.",
)
@topic_option
@_body_option
@pass_settings
def query_msg_by_unique_key(
    settings: Settings, addresses: str, msg_id: str, topic: str, show_body: bool
) -> None:
    """Show the messages of TOPIC whose unique key (UNIQ_KEY property) is MSGID, through the
    key index on every broker group of the topic (its master, else a slave); usually one (a
    send retried after a lost answer can store two), retry and dead-letter copies last.

    The unique key is the id the client gave the message: the id the official RocketMQ
    clients show. Committed messages only. Finding nothing is an error (exit status 1).
    Prints {"topic", "msgId", "messages": [...]} with --json.
    """
    key = msg_id.strip()
    errors: list[str] = []

    async def work() -> list[FoundMessage]:
        what = f"searching the key index of every broker group of {topic} for {key}"
        async with Spinner(what), Lookup(addresses) as lookup:
            return await lookup.by_unique_key(key, topic, errors=errors)

    found = run(work())
    if not found:
        raise CommandError(
            f"no message with unique key {key!r} in topic {topic!r}"
            + (f" ({'; '.join(errors)})" if errors else "")
        )
    _show_found(settings, found, show_body, {"topic": topic, "msgId": key}, errors)


@click.command("queryMsgByKey", short_help="Find a topic's messages by key.")
@addresses_option
@topic_option
@click.option("-k", "--key", required=True, metavar="KEY", help="Message key (or UNIQ_KEY).")
@click.option(
    "-b",
    "--begin",
    "begin_ms",
    type=PastTimeType(),
    default=None,
    help="Stored at or after TIME (now, -1h, ms or ISO-8601; mqadmin's -b).",
)
@click.option(
    "-e",
    "--end",
    "end_ms",
    type=PastTimeType(),
    default=None,
    help="Stored at or before TIME (now, -1h, ms or ISO-8601; mqadmin's -e).",
)
@click.option(
    "-m",
    "--max",
    "max_num",
    type=click.IntRange(1, 1024),
    default=64,
    show_default=True,
    metavar="N",
    help="At most N messages per broker group (the newest; mqadmin's -m).",
)
@_body_option
@pass_settings
def query_msg_by_key(
    settings: Settings,
    addresses: str,
    topic: str,
    key: str,
    begin_ms: int | None,
    end_ms: int | None,
    max_num: int,
    show_body: bool,
) -> None:
    """Find the messages of TOPIC whose keys include KEY, on every broker group (its master,
    else a slave), oldest first. Committed messages only.

    Times are now, a time ago (-1h), epoch milliseconds or ISO-8601 (UTC unless an offset is
    given). A broker group that answered --max messages may hold more: a line on stderr says
    so ("truncated": true). Finding nothing is an error (exit status 1), and so is a broker
    group that could not be asked (reported on stderr after what the others returned). Prints
    {"topic", "key", "truncated", "messages": [...]} with --json.
    """
    if begin_ms is not None and end_ms is not None and begin_ms > end_ms:
        raise click.UsageError(f"--begin {utc_iso(begin_ms)} is after --end {utc_iso(end_ms)}")

    errors: list[str] = []

    async def work() -> list[FoundMessage]:
        what = f"searching the key index of every broker group of {topic} for {key}"
        async with Spinner(what), Lookup(addresses) as lookup:
            return await lookup.by_key(
                topic, key, begin_ms=begin_ms, end_ms=end_ms, max_num=max_num, errors=errors
            )

    found = run(work())
    if not found:
        raise CommandError(f"no message with key {key!r} in topic {topic!r}")
    per_group = Counter(m.broker_name for m in found)
    capped = sorted(name for name, n in per_group.items() if n >= max_num)
    try:
        doc = {"topic": topic, "key": key, "truncated": bool(capped)}
        _show_found(settings, found, show_body, doc, errors)
    finally:
        if capped:
            click.echo(
                f"rmqctl: {', '.join(capped)} answered --max {max_num} messages, the newest: "
                "there may be more (raise --max or narrow --begin/--end)",
                err=True,
            )


@click.command("queryMsgByOffset", short_help="Show the message at a queue offset.")
@addresses_option
@topic_option
@click.option(
    "-b", "--broker", "broker_name", required=True, metavar="BROKER", help="Broker group."
)
@click.option(
    "-q",
    "--queue",
    "queue_id",
    required=True,
    type=click.IntRange(min=0),
    metavar="QUEUE",
    help="Queue id.",
)
@click.option(
    "-o",
    "--offset",
    required=True,
    type=click.IntRange(min=0),
    metavar="OFFSET",
    help="Queue offset.",
)
@_body_option
@pass_settings
def query_msg_by_offset(
    settings: Settings,
    addresses: str,
    topic: str,
    broker_name: str,
    queue_id: int,
    offset: int,
    show_body: bool,
) -> None:
    """Show the message at OFFSET of queue QUEUE of TOPIC on broker group BROKER (read from
    its master, else a slave). Committed messages only."""

    async def work() -> FoundMessage:
        async with Lookup(addresses) as lookup:
            return await lookup.by_offset(topic, broker_name, queue_id, offset)

    found = run(work())
    _show(settings, [found], show_body, found.to_dict(body=show_body))
