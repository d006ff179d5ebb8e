"""Message commands: sendMessage (scheduled with --delay / --deliver-at), consumeMessage,
recallMessage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import click

from client.consumer import Consumer
from client.message import ReceivedMessage, SendResult
from client.producer import Producer
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.filter import Filter, FilterError
from protocol.message import PROP_KEYS, PROP_TAGS
from rmqctl.common import (
    Settings,
    Spinner,
    TimeType,
    addresses_option,
    emit,
    group_option,
    pass_settings,
    run,
    stdout_closed,
    table,
    topic_option,
    utc_iso,
    write_stdout,
)

# Sends in flight at once for --count.
_WINDOW = 64
# Up to this many messages, a table row each; more: a summary (and a progress bar on a terminal)
# unless --verbose.
_ROWS_UP_TO = 10

M = TypeVar("M", bound=ReceivedMessage)

_DELAY = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DelayType(click.ParamType[float]):
    """A delay: a number with a unit (500ms, 30s, 5m, 2h, 1d; none: seconds)."""

    name = "DELAY"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        match = _DELAY.match(str(value))
        if match is None:
            self.fail(f"{value!r} is not a delay such as 500ms, 30s, 5m, 2h or 1d", param, ctx)
        return float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


class PropertyType(click.ParamType[tuple[str, str]]):
    """A user property: NAME=VALUE (the value may be empty and may hold '=')."""

    name = "NAME=VALUE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        name, eq, text = str(value).partition("=")
        if not eq or not name.strip():
            self.fail(f"{value!r} is not NAME=VALUE", param, ctx)
        if name in (PROP_KEYS, PROP_TAGS):
            self.fail(f"{name} is set with --{name.lower()}, not as a property", param, ctx)
        if any(c in str(value) for c in "\x01\x02"):
            # The separators of a record's properties: the property would read back as others.
            self.fail(f"{value!r}: a property must not hold \\x01 or \\x02", param, ctx)
        return name, text


@click.command("sendMessage", short_help="Send a message, N times with --count.")
@addresses_option
@topic_option
@click.option("-p", "--body", required=True, metavar="BODY", help="Message body (sent as UTF-8).")
@click.option("-k", "--keys", default="", metavar="KEYS", help="Message keys.")
@click.option("--tags", default="", metavar="TAGS", help="Message tags.")
@click.option(
    "--property",
    "properties",
    multiple=True,
    type=PropertyType(),
    metavar="NAME=VALUE",
    help="A user property (repeat for more); consumers see it among the message's properties.",
)
@click.option(
    "--count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="Send the message N times.",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    metavar="S",
    help="Seconds each send may keep retrying after retriable failures (covers a failover).",
)
@click.option(
    "--attempt-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    metavar="S",
    help="Seconds one attempt waits for the broker's answer before the send is retried.",
)
@click.option(
    "--verbose",
    "rows",
    is_flag=True,
    help=f"One table row per message however many (default: up to {_ROWS_UP_TO}, past that only "
    "the summary line).",
)
@click.option(
    "--delay",
    type=DelayType(),
    default=None,
    help="Scheduled message: deliver after this delay (500ms, 30s, 5m, 2h, 1d; a bare "
    "number is seconds).",
)
@click.option(
    "--deliver-at",
    type=TimeType(),
    default=None,
    help="Scheduled message: deliver at this time (epoch ms, or ISO 8601 such as "
    "2026-11-24T15:00:00: UTC unless an offset is given, e.g. 2026-11-24T16:00:00+01:00).",
)
@click.option(
    "--message-group",
    default=None,
    metavar="GROUP",
    help="FIFO message group (1..128 UTF-8 bytes): every message to the group's queue, in order.",
)
@click.option(
    "--trace",
    is_flag=True,
    help="Write a trace record of each send to the trace topic (RocketMQ's enableMsgTrace; "
    "queryMsgTraceById shows it).",
)
@pass_settings
def send_message(
    settings: Settings,
    addresses: str,
    topic: str,
    body: str,
    keys: str,
    tags: str,
    properties: tuple[tuple[str, str], ...],
    count: int,
    deadline: float,
    attempt_timeout: float,
    rows: bool,
    delay: float | None,
    deliver_at: int | None,
    message_group: str | None,
    trace: bool,
) -> None:
    """Send a message (N times with --count) and report where each was stored.

    A send that fails in a retriable way (connection lost, no master during a failover, busy,
    ...) is retried on another queue until --deadline; it fails (exit status 1) only past it.

    Up to 10 messages get a table row each, then a summary line (count, rate, the queues
    used); more get the summary line alone, and a progress bar on stderr while they go when
    stderr is a terminal; --verbose (or the global -v) prints every row.

    Prints {"sent": N, "elapsedMs", "messagesPerSecond", "queues": [{"brokerName", "queueId",
    "messages"}], "results": [{"msgId", "brokerName", "queueId", "queueOffset"}]}, with
    "deliverAtMs" in each result of a scheduled message.

    With --delay or --deliver-at the message is scheduled: stored now, delivered to the topic
    at that time. Its msgId recalls it until then (recallMessage); its queueOffset is -1.

    With --message-group the messages carry that FIFO group (__SHARDINGKEY) and all go to the
    queue the group hashes to, stored in order; it cannot be combined with scheduling.

    --property NAME=VALUE (repeatable) adds user properties, which consumers read as the
    message's properties (an official RocketMQ client as its user properties).
    """
    payload = body.encode()
    if delay is not None and deliver_at is not None:
        raise click.UsageError("give --delay or --deliver-at, not both")
    if message_group is not None and (delay is not None or deliver_at is not None):
        raise click.UsageError("a message with --message-group cannot be scheduled")
    bar = count > _ROWS_UP_TO and sys.stderr.isatty()

    async def work() -> list[SendResult]:
        results: list[SendResult] = []
        with _progress(count if bar else 0) as advance:
            async with Producer(
                addresses, send_deadline=deadline, send_timeout=attempt_timeout, trace=trace
            ) as producer:
                for first in range(0, count, _WINDOW):
                    n = min(_WINDOW, count - first)
                    sends = (
                        producer.send(
                            topic,
                            payload,
                            keys=keys,
                            tags=tags,
                            properties=dict(properties) or None,
                            delay=delay,
                            deliver_at=deliver_at,
                            message_group=message_group,
                        )
                        for _ in range(n)
                    )
                    results.extend(await asyncio.gather(*sends))
                    advance(n)
        return results

    started = time.monotonic()
    results = run(work())
    elapsed = time.monotonic() - started
    queues = Counter((r.broker_name, r.queue_id) for r in results)
    doc = {
        "sent": len(results),
        "elapsedMs": round(elapsed * 1000),
        "messagesPerSecond": round(len(results) / elapsed) if elapsed > 0 else None,
        "queues": [
            {"brokerName": b, "queueId": q, "messages": n} for (b, q), n in sorted(queues.items())
        ],
        "results": [
            {
                "msgId": r.msg_id,
                "brokerName": r.broker_name,
                "queueId": r.queue_id,
                "queueOffset": r.queue_offset,
                **({} if r.deliver_at_ms is None else {"deliverAtMs": r.deliver_at_ms}),
            }
            for r in results
        ],
    }

    def human() -> str:
        summary = send_summary(len(results), elapsed, queues)
        if len(results) > _ROWS_UP_TO and not (rows or settings.verbose):
            return summary
        headers = ["Msg Id", "Broker Name", "Queue", "Offset"]
        lines: list[list[object]] = [
            [r.msg_id, r.broker_name, r.queue_id, r.queue_offset] for r in results
        ]
        if any(r.deliver_at_ms is not None for r in results):
            headers.append("Deliver At")
            sent_ms = int((time.time() - elapsed) * 1000)
            for line, r in zip(lines, results, strict=True):
                at = r.deliver_at_ms
                if at is not None:
                    line[3] = "scheduled"
                past = at is not None and at <= sent_ms
                # A time already past is delivered at once: said, so a mistyped year shows.
                line.append(
                    ""
                    if at is None
                    else utc_iso(at) + (" (past: delivered at once)" if past else "")
                )
        return table(headers, lines) + "\n" + summary

    emit(settings, doc, human)


def send_summary(sent: int, elapsed: float, queues: Counter[tuple[str, int]]) -> str:
    """``sent 1000 messages in 0.52 s (1923 msg/s) to 4 queues: broker-a 0 1 2 3``."""
    rate = f"{sent / elapsed:.0f} msg/s" if elapsed > 0 else "-"
    by_broker: dict[str, list[int]] = {}
    for broker, queue in sorted(queues):
        by_broker.setdefault(broker, []).append(queue)
    where = ", ".join(f"{b} {' '.join(map(str, qs))}" for b, qs in by_broker.items())
    noun = "message" if sent == 1 else "messages"
    qnoun = "queue" if len(queues) == 1 else "queues"
    return f"sent {sent} {noun} in {elapsed:.2f} s ({rate}) to {len(queues)} {qnoun}: {where}"


@contextlib.contextmanager
def _progress(length: int) -> Iterator[Any]:
    """A progress bar on stderr for ``length`` items (none when 0); yields ``advance(n)``."""
    if length <= 0:
        yield lambda n: None
        return
    with click.progressbar(
        length=length, label="sending", file=sys.stderr, show_pos=True, show_eta=True
    ) as bar:
        yield bar.update


@click.command("recallMessage", short_help="Recall a scheduled message before its delivery.")
@addresses_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic it was sent to.")
@click.option("-i", "--msg-id", required=True, metavar="MSGID", help="Message id its send printed.")
@pass_settings
def recall_message(settings: Settings, addresses: str, topic: str, msg_id: str) -> None:
    """Recall a scheduled message (sent with --delay or --deliver-at) before it is delivered.

    Fails (exit status 1) when the id is malformed, is not a scheduled message of TOPIC, or
    was already delivered or recalled.

    Prints {"recalled": MSGID, "topic": TOPIC}.
    """

    async def work() -> None:
        async with Producer(addresses) as producer:
            await producer.recall(topic, msg_id)

    run(work())
    emit(
        settings,
        {"recalled": msg_id, "topic": topic},
        lambda: f"recalled {msg_id} of topic {topic}",
    )


@click.command("consumeMessage", short_help="Consume messages as a member of a group.")
@addresses_option
@topic_option
@group_option
@click.option(
    "--count", type=click.IntRange(min=1), default=None, metavar="N", help="Stop after N messages."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="S",
    help="Stop after S seconds (default: run until N messages or Ctrl-C).",
)
@click.option(
    "--from",
    "start_from",
    type=click.Choice(["earliest", "latest"]),
    default="earliest",
    show_default=True,
    help="Where a group with no committed offset starts (not with --pop).",
)
@click.option(
    "--filter",
    "tag_filter",
    default="*",
    show_default=True,
    metavar="EXPR",
    help="Tag expression: only messages whose tag is listed, e.g. 'TagA || TagB'.",
)
@click.option(
    "--sql",
    "sql_filter",
    default=None,
    metavar="EXPR",
    help="SQL92 filter over message properties instead of --filter, e.g. "
    "\"region = 'eu' AND amount > 100\" (the broker needs enable_property_filter = true).",
)
@click.option(
    "--pop",
    is_flag=True,
    help="POP consumption (no queue ownership: any number of consumers share every queue); "
    "each printed message is acked.",
)
@click.option(
    "--invisible-time",
    type=click.FloatRange(min=1, max=43200),
    default=30.0,
    show_default=True,
    metavar="S",
    help="With --pop: how long a received message stays hidden from the group until acked.",
)
@click.option(
    "--trace",
    is_flag=True,
    help="Write a trace record of each message consumed to the trace topic (RocketMQ's "
    "enableMsgTrace; queryMsgTraceById shows it).",
)
@pass_settings
def consume_message(
    settings: Settings,
    addresses: str,
    topic: str,
    group: str,
    count: int | None,
    timeout: float | None,
    start_from: str,
    tag_filter: str,
    sql_filter: str | None,
    pop: bool,
    invisible_time: float,
    trace: bool,
) -> None:
    """Consume messages as a member of GROUP, printing each as it arrives.

    With --json, one JSON line per message: {"msgId", "brokerName", "queueId", "queueOffset",
    "body", "keys", "tags", "properties", "messageGroup", "bornTimestamp", "storeTimestamp"}
    (body decoded as UTF-8, bad bytes replaced; keys and tags "" when none; properties: the
    others as stored, UNIQ_KEY among them for a message of an official RocketMQ client;
    messageGroup null for none). Stops after
    --count messages, --timeout seconds, or Ctrl-C; the offsets of the printed messages are
    committed before exit. Stopped before --count messages, it says "N of M received in T s"
    on stderr (exit status 0: what was printed was consumed).

    --sql EXPR subscribes with a SQL92 condition over the messages' properties instead of a tag
    expression (docs/filters.md), with or without --pop; the broker must have
    enable_property_filter = true, else the command stops with SQL_FILTER_DISABLED.

    With --pop the messages are taken by POP (docs/pop.md) and acked once printed; a message
    printed but not acked (the command was killed) comes back after --invisible-time to any
    consumer of the group. --json lines then add "attempt" (1 the first time). A group new to POP starts at each queue's first message.
    For a FIFO group (updateSubGroup --fifo) a message group's next message comes only once the
    previous one was acked (docs/fifo.md).
    """
    if sql_filter is not None and tag_filter.strip() not in ("", "*"):
        raise click.UsageError("--sql and --filter cannot be given together")
    try:
        flt = Filter.tags(tag_filter) if sql_filter is None else Filter.sql(sql_filter)
    except FilterError as exc:
        hint = "'--filter'" if sql_filter is None else "'--sql'"
        raise click.BadParameter(str(exc), param_hint=hint) from None
    if pop:
        run(
            _consume_pop(
                settings, addresses, topic, group, count, timeout, invisible_time, flt, trace
            )
        )
        return
    run(_consume(settings, addresses, topic, group, count, timeout, start_from, flt, trace))


async def _consume_pop(
    settings: Settings,
    addresses: str,
    topic: str,
    group: str,
    count: int | None,
    timeout: float | None,
    invisible: float,
    tag_filter: Filter,
    trace: bool = False,
) -> None:
    consumer = SimpleConsumer(addresses, group, topic, filter=tag_filter, trace=trace)
    spinner = Spinner(_waiting_for(topic, group, 0, pop=True))

    async def take(left: int | None, wait: float) -> list[PopMessage]:
        want = 32 if left is None else min(32, left)
        return await consumer.receive(want, invisible_duration=invisible, wait=wait)

    async def printed(msgs: list[PopMessage]) -> None:
        await asyncio.gather(*(consumer.ack(m) for m in msgs))

    await _print_received(
        settings,
        consumer,
        spinner,
        lambda n: _waiting_for(topic, group, n, pop=True),
        count,
        timeout,
        0.5,
        take,
        _pop_json_line,
        printed,
    )


def _waiting_for(topic: str, group: str, printed: int, *, pop: bool) -> str:
    """What consumeMessage's spinner says: ``waiting for messages of T as group G by POP
    (3 received; Ctrl-C to stop)``."""
    how = " by POP" if pop else ""
    so_far = f"{printed} received; " if printed else ""
    return f"waiting for messages of {topic} as group {group}{how} ({so_far}Ctrl-C to stop)"


def _pop_json_line(m: PopMessage) -> str:
    return json.dumps({**message_doc(m), "attempt": m.attempt})


async def _consume(
    settings: Settings,
    addresses: str,
    topic: str,
    group: str,
    count: int | None,
    timeout: float | None,
    start_from: str,
    tag_filter: Filter | str = "*",
    trace: bool = False,
) -> None:
    consumer = Consumer(
        addresses, group, topic, start_from=start_from, filter=tag_filter, trace=trace
    )
    # A bounded wait (--timeout) ends by itself; an open-ended one says what it waits for.
    spinner = Spinner(_waiting_for(topic, group, 0, pop=False))
    spinner.enabled = spinner.enabled and timeout is None

    async def take(left: int | None, wait: float) -> list[ReceivedMessage]:
        return await consumer.receive(wait, max_messages=1024 if left is None else left)

    await _print_received(
        settings,
        consumer,
        spinner,
        lambda n: _waiting_for(topic, group, n, pop=False),
        count,
        timeout,
        0.25,
        take,
        _json_line,
    )


async def _print_received(
    settings: Settings,
    consumer: Consumer | SimpleConsumer,
    spinner: Spinner,
    waiting: Callable[[int], str],
    count: int | None,
    timeout: float | None,
    poll: float,
    take: Callable[[int | None, float], Awaitable[list[M]]],
    json_line: Callable[[M], str],
    printed_hook: Callable[[list[M]], Awaitable[None]] | None = None,
) -> None:
    """consumeMessage's loop, either consumer: start ``consumer``, print what ``take(left,
    wait)`` returns (``left``: messages still wanted, None for no end; ``wait``: at most
    ``poll`` seconds) until ``count`` messages, ``timeout`` seconds, Ctrl-C or a closed stdout,
    calling ``printed_hook`` on each batch once printed (POP acks there); close the consumer.
    Stopped before ``count``, says "N of M received in T s" on stderr."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    started = loop.time()
    deadline = None if timeout is None else started + timeout
    printed = 0
    closed = False
    try:
        await consumer.start()
        header = not settings.json  # printed over the first messages: a refusal prints alone
        async with spinner:
            while not stop.is_set() and (count is None or printed < count):
                wait = poll
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        break
                msgs = await take(None if count is None else count - printed, wait)
                if not msgs:
                    continue
                lines = "\n".join(json_line(m) if settings.json else _human_line(m) for m in msgs)
                if header:
                    lines, header = f"{_HUMAN_HEADER}\n{lines}", False
                spinner.clear()
                try:
                    write_stdout(lines + "\n")
                except BrokenPipeError:
                    stdout_closed()
                    closed = True
                    break
                if printed_hook is not None:
                    await printed_hook(msgs)
                printed += len(msgs)
                spinner.say(waiting(printed))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        await consumer.close()
    if count is not None and printed < count and not closed:
        click.echo(f"{printed} of {count} received in {loop.time() - started:.1f} s", err=True)


def message_doc(m: ReceivedMessage) -> dict[str, Any]:
    """A message as a --json line shows it: keys and tags have their own fields, and
    ``properties`` holds the others, as stored (the application's, and the ones a sender or the
    broker set: ``UNIQ_KEY``, the id an official RocketMQ client gave it, ``__SHARDINGKEY``, ...)."""
    return {
        "msgId": m.msg_id,
        "brokerName": m.broker_name,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "body": m.body.decode("utf-8", errors="replace"),
        "keys": m.keys,
        "tags": m.tags,
        "properties": {k: v for k, v in m.properties.items() if k not in (PROP_KEYS, PROP_TAGS)},
        "messageGroup": m.message_group,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
    }


def _json_line(m: ReceivedMessage) -> str:
    return json.dumps(message_doc(m))


_HUMAN_COLUMNS = ((32, "Msg Id"), (16, "Broker Name"), (5, "Queue"), (10, "Offset"), (16, "Keys"))
_HUMAN_HEADER = "  ".join(name.ljust(w) for w, name in _HUMAN_COLUMNS) + "  Body"


def _human_line(m: ReceivedMessage) -> str:
    values = (m.msg_id, m.broker_name, m.queue_id, m.queue_offset, m.keys)
    cells = "  ".join(str(v).ljust(w) for (w, _), v in zip(_HUMAN_COLUMNS, values, strict=True))
    return f"{cells}  {m.body.decode('utf-8', errors='replace')}"
