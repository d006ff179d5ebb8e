"""Offset commands: resetOffsetByTime and skipAccumulatedMessage (docs/operations.md,
"Resetting offsets"). Both work while the group's members run: each master commits the new
offsets and tells the members, which drop what they pulled and go on from there."""

from __future__ import annotations

import time

import click

from client.offset_reset import OffsetAdmin, ResetReport
from protocol.broker_requests.offsets import FUTURE_SLACK_MS, TO_MAX
from rmqctl.common import (
    CommandError,
    PastTimeType,
    Settings,
    addresses_option,
    emit,
    group_option,
    pass_settings,
    run,
    table,
    topic_option,
    utc_iso,
)


@click.command("resetOffsetByTime", short_help="Replay or skip a consumer group from a time.")
@addresses_option
@group_option
@topic_option
@click.option(
    "-s",
    "--timestamp",
    "when",
    required=True,
    type=PastTimeType(),
    metavar="TIME",
    help=(
        "now, a time ago (-1h, -30m, -90s, -2d), epoch ms, ISO 8601 (UTC unless it gives an "
        "offset) or yyyy-MM-dd#HH:mm:ss:SSS (UTC)."
    ),
)
@click.option(
    "--force",
    is_flag=True,
    help=(
        "Also move queues forward: without it a queue whose committed offset is before the "
        "time keeps it (nothing is skipped)."
    ),
)
@pass_settings
def reset_offset_by_time(
    settings: Settings, addresses: str, group: str, topic: str, when: int, force: bool
) -> None:
    """Move GROUP's offsets of every queue of TOPIC to the first message stored at or after
    TIME, on every master holding the topic, while the group's members run: they drop what
    they pulled and go on from the new offsets without a restart. A time before a queue's
    first retained message moves it to its min offset (said per queue); a time in the future
    is refused. A static topic resets by logical offset (always as with --force).

    Prints {"group", "topic", "timestamp", "queues": [{"brokerName", "queueId", "offset",
    "previous", "min", "max", "outcome"}], "notified", "skipped": [{"brokerName", "why"}]};
    outcome is reset, kept (without --force), min or max.
    """
    now = int(time.time() * 1000)
    if when > now + FUTURE_SLACK_MS:
        raise CommandError(
            f"{utc_iso(when)} is in the future (now is {utc_iso(now)}): nothing was stored "
            "then, nothing reset"
        )

    async def work() -> ResetReport:
        async with OffsetAdmin(addresses) as admin:
            return await admin.resetter().by_time(group, topic, when, force=force)

    report = run(work())
    _emit(settings, report, when, f"to {utc_iso(when)}")


@click.command(
    "skipAccumulatedMessage", short_help="Move a consumer group to the end of a topic (lag 0)."
)
@addresses_option
@group_option
@topic_option
@pass_settings
def skip_accumulated_message(settings: Settings, addresses: str, group: str, topic: str) -> None:
    """Move GROUP's offsets of every queue of TOPIC to the queue's end, on every master holding
    the topic: the backlog is skipped (the group's lag is 0 at once) while the members run;
    they go on with the messages sent from now.

    Prints the resetOffsetByTime document (timestamp -1).
    """

    async def work() -> ResetReport:
        async with OffsetAdmin(addresses) as admin:
            return await admin.resetter().by_time(group, topic, TO_MAX, force=True)

    report = run(work())
    _emit(settings, report, TO_MAX, "to the end of each queue")


def _emit(settings: Settings, report: ResetReport, when: int, to: str) -> None:
    doc = {"timestamp": when, **report.to_dict()}

    def human() -> str:
        moved = [r for r in report.queues.values() if r.outcome != "kept"]
        lines = [
            f"reset {len(moved)} of {len(report.queues)} queue(s) of {report.group} on "
            f"{report.topic} {to}; told {report.notified} member connection(s)"
        ]
        rows = [
            [
                mq.broker_name,
                mq.queue_id,
                r.previous,
                r.offset,
                r.min_offset,
                r.max_offset if r.max_offset >= 0 else "",
                r.outcome,
            ]
            for mq, r in sorted(report.queues.items())
        ]
        headers = ["Broker Name", "Queue", "Previous", "Offset", "Min", "Max", "Outcome"]
        lines.append(table(headers, rows))
        for mq, r in sorted(report.queues.items()):
            if r.outcome == "min" and when != TO_MAX:
                lines.append(
                    f"note: {mq.broker_name}/{mq.queue_id}: the time is at or before its first "
                    f"retained message: reset to its min offset {r.offset}"
                )
            elif r.outcome == "kept":
                lines.append(
                    f"note: {mq.broker_name}/{mq.queue_id} kept offset {r.offset}: it is before "
                    "the time (--force moves it forward)"
                )
        for name, why in sorted(report.skipped.items()):
            lines.append(f"note: {name} skipped: {why}")
        return "\n".join(lines)

    emit(settings, doc, human)
