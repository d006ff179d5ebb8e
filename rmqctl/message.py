"""Message commands: sendMessage, consumeMessage."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

import click

from client.consumer import Consumer
from client.message import ReceivedMessage, SendResult
from client.producer import Producer
from rmqctl.common import Settings, addresses_option, emit, pass_settings, run, stdout_closed, table

# Sends in flight at once for --count.
_WINDOW = 64


@click.command("sendMessage", short_help="Send a message, N times with --count.")
@addresses_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-p", "--body", required=True, metavar="BODY", help="Message body (sent as UTF-8).")
@click.option("-k", "--keys", default="", metavar="KEYS", help="Message keys.")
@click.option("--tags", default="", metavar="TAGS", help="Message tags.")
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
@pass_settings
def send_message(
    settings: Settings,
    addresses: str,
    topic: str,
    body: str,
    keys: str,
    tags: str,
    count: int,
    deadline: float,
    attempt_timeout: float,
) -> None:
    """Send a message (N times with --count) and report where each was stored.

    A send that fails in a retriable way (connection lost, no master during a failover, busy,
    ...) is retried on another queue until --deadline; it fails (exit status 1) only past it.

    Prints {"sent": N, "results": [{"msgId", "brokerName", "queueId", "queueOffset"}]}.
    """
    payload = body.encode()

    async def work() -> list[SendResult]:
        results: list[SendResult] = []
        async with Producer(
            addresses, send_deadline=deadline, send_timeout=attempt_timeout
        ) as producer:
            for first in range(0, count, _WINDOW):
                n = min(_WINDOW, count - first)
                sends = (producer.send(topic, payload, keys=keys, tags=tags) for _ in range(n))
                results.extend(await asyncio.gather(*sends))
        return results

    results = run(work())
    doc = {
        "sent": len(results),
        "results": [
            {
                "msgId": r.msg_id,
                "brokerName": r.broker_name,
                "queueId": r.queue_id,
                "queueOffset": r.queue_offset,
            }
            for r in results
        ],
    }
    rows = [[r.msg_id, r.broker_name, r.queue_id, r.queue_offset] for r in results]
    emit(
        settings,
        doc,
        lambda: (
            table(["Msg Id", "Broker Name", "Queue", "Offset"], rows) + f"\nsent {len(results)}"
        ),
    )


@click.command("consumeMessage", short_help="Consume messages as a member of a group.")
@addresses_option
@click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
@click.option("-g", "--group", required=True, metavar="GROUP", help="Consumer group.")
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
    help="Where a group with no committed offset starts.",
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
) -> None:
    """Consume messages as a member of GROUP, printing each as it arrives.

    With --json, one JSON line per message: {"msgId", "brokerName", "queueId", "queueOffset",
    "body", "keys", "storeTimestamp"} (body decoded as UTF-8, bad bytes replaced). Stops after
    --count messages, --timeout seconds, or Ctrl-C; the offsets of the printed messages are
    committed before exit.
    """
    run(_consume(settings, addresses, topic, group, count, timeout, start_from))


async def _consume(
    settings: Settings,
    addresses: str,
    topic: str,
    group: str,
    count: int | None,
    timeout: float | None,
    start_from: str,
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    deadline = None if timeout is None else loop.time() + timeout
    consumer = Consumer(addresses, group, topic, start_from=start_from)
    printed = 0
    try:
        await consumer.start()
        if not settings.json:
            click.echo(_HUMAN_HEADER)
        while not stop.is_set() and (count is None or printed < count):
            wait = 0.25
            if deadline is not None:
                wait = min(wait, deadline - loop.time())
                if wait <= 0:
                    break
            want = 1024 if count is None else count - printed
            msgs = await consumer.receive(wait, max_messages=want)
            if not msgs:
                continue
            lines = "\n".join(_json_line(m) if settings.json else _human_line(m) for m in msgs)
            try:
                sys.stdout.write(lines + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                stdout_closed()
                break
            printed += len(msgs)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        await consumer.close()


def message_doc(m: ReceivedMessage) -> dict[str, Any]:
    return {
        "msgId": m.msg_id,
        "brokerName": m.broker_name,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "body": m.body.decode("utf-8", errors="replace"),
        "keys": m.keys,
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
