"""Consumer group commands: updateSubGroup, getSubGroup, queryDLQ, resendDLQ."""

from __future__ import annotations

import datetime
from typing import Any

import click

from client.admin import Admin
from protocol.message import RecordError, parse_msg_id
from protocol.retry import SubscriptionGroupConfig
from rmqctl.common import (
    CommandError,
    Settings,
    addresses_option,
    emit,
    group_option,
    pass_settings,
    run,
    table,
)

_BROKER_HELP = "Only this broker group (default: every broker group)."


@click.command("updateSubGroup", short_help="Create or update a consumer group's retry settings.")
@addresses_option
@group_option
@click.option(
    "--retry-max-times",
    type=int,
    default=None,
    metavar="N",
    help="Retries before a message goes to the group's DLQ (0..10000; default 16).",
)
@click.option(
    "--retry-delays",
    default=None,
    metavar="LEVELS",
    help=(
        "Back-off before each retry, e.g. '10s 30s 1m' (units ms, s, m, h, d; the last level "
        "repeats). Default: 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h."
    ),
)
@click.option(
    "--consume-retry/--no-consume-retry",
    default=None,
    help="Whether members read the retry topic; without it a nack goes to the DLQ at once.",
)
@click.option(
    "--fifo/--no-fifo",
    default=None,
    help=(
        "A FIFO group (consumeMessageOrderly): members consume each queue in order and retry a "
        "failed message in place (it blocks its queue) up to the retry max, then to the DLQ."
    ),
)
@click.option("-b", "--broker", "broker_name", default=None, metavar="NAME", help=_BROKER_HELP)
@pass_settings
def update_sub_group(
    settings: Settings,
    addresses: str,
    group: str,
    retry_max_times: int | None,
    retry_delays: str | None,
    consume_retry: bool | None,
    fifo: bool | None,
    broker_name: str | None,
) -> None:
    """Create or update a consumer group's retry settings on the master of every broker
    group (or of -b). Settings not given keep their current value (a new group: the
    defaults). Slaves copy them from their master.

    Prints {"group", "brokers": {name: settings}}.
    """
    doc: dict[str, Any] = {"groupName": group}
    if retry_max_times is not None:
        doc["retryMaxTimes"] = retry_max_times
    if retry_delays is not None:
        doc["retryDelays"] = retry_delays
    if consume_retry is not None:
        doc["consumeRetryEnable"] = consume_retry
    if fifo is not None:
        doc["consumeMessageOrderly"] = fifo

    async def work() -> dict[str, dict[str, Any]]:
        async with Admin(addresses) as admin:
            return await admin.update_sub_group(doc, broker_name)

    stored = run(work())
    emit(settings, {"group": group, "brokers": stored}, lambda: _groups_table(stored))


@click.command("getSubGroup", short_help="Show a consumer group's retry settings.")
@addresses_option
@group_option
@click.option("-b", "--broker", "broker_name", default=None, metavar="NAME", help=_BROKER_HELP)
@pass_settings
def get_sub_group(settings: Settings, addresses: str, group: str, broker_name: str | None) -> None:
    """Show a consumer group's retry settings on every broker group (read from its master,
    or a slave while it has none). A group never configured there shows the defaults. A group
    no broker group knows (no settings, offsets, members, retry or dead-letter topic) is
    refused: one line, exit status 1.

    Prints {"group", "brokers": {name: settings, "configured": bool}}.
    """

    async def work() -> dict[str, dict[str, Any] | None]:
        async with Admin(addresses) as admin:
            found = await admin.get_sub_group(group, broker_name)
            if all(doc is None for doc in found.values()):
                await admin.require_group(group, broker_name)
            return found

    found = run(work())
    brokers = {
        name: {**(doc or _defaults(group)), "configured": doc is not None}
        for name, doc in found.items()
    }
    emit(settings, {"group": group, "brokers": brokers}, lambda: _groups_table(brokers))


def _defaults(group: str) -> dict[str, Any]:
    return SubscriptionGroupConfig(group).to_dict()


def _groups_table(brokers: dict[str, dict[str, Any]]) -> str:
    rows = [
        [
            name,
            doc.get("groupName"),
            doc.get("retryMaxTimes"),
            "yes" if doc.get("consumeRetryEnable") else "no",
            "yes" if doc.get("consumeMessageOrderly") else "no",
            doc.get("retryDelays"),
        ]
        for name, doc in sorted(brokers.items())
    ]
    headers = ["Broker Name", "Group", "Retry Max", "Consume Retry", "FIFO", "Retry Delays"]
    return table(headers, rows)


@click.command("queryDLQ", short_help="List a consumer group's dead-letter messages.")
@addresses_option
@group_option
@click.option(
    "--max",
    "max_count",
    type=click.IntRange(1, 10_000),
    default=1000,
    show_default=True,
    metavar="N",
    help="At most N messages per broker group (oldest first).",
)
@click.option("-b", "--broker", "broker_name", default=None, metavar="NAME", help=_BROKER_HELP)
@pass_settings
def query_dlq(
    settings: Settings, addresses: str, group: str, max_count: int, broker_name: str | None
) -> None:
    """List the messages of the group's dead-letter queue (%DLQ%GROUP) on every broker group:
    id, original topic and id, reconsume count, last failure reason, store time, and whether
    resendDLQ already re-sent it. A group no broker group knows is refused (one line, exit
    status 1); a group that exists with an empty DLQ says so, exit status 0.

    Prints {"group", "messages": [{"brokerName", "msgId", "originTopic", "originMsgId",
    "reconsumeTimes", "reason", "storeTimestamp", "queueOffset", "bodySize", "resent"}]}.
    """

    async def work() -> dict[str, list[dict[str, Any]]]:
        async with Admin(addresses) as admin:
            found = await admin.query_dlq(group, broker_name, max_count)
            if not any(found.values()):
                await admin.require_group(group, broker_name)
            return found

    found = run(work())
    messages = [{"brokerName": name, **m} for name, ms in sorted(found.items()) for m in ms]
    rows = [
        [
            m["brokerName"],
            m["msgId"],
            m["originTopic"],
            m["originMsgId"],
            m["reconsumeTimes"],
            _time(m["storeTimestamp"]),
            "yes" if m["resent"] else "no",
            m["reason"],
        ]
        for m in messages
    ]
    headers = [
        "Broker Name",
        "Msg Id",
        "Topic",
        "Origin Msg Id",
        "Retries",
        "Stored (UTC)",
        "Resent",
    ]
    emit(
        settings,
        {"group": group, "messages": messages},
        lambda: table([*headers, "Reason"], rows) if rows else f"no DLQ messages for {group}",
    )


@click.command("resendDLQ", short_help="Re-send dead-letter messages to their original topic.")
@addresses_option
@group_option
@click.option("--msg-id", default=None, metavar="ID", help="Re-send this DLQ message (queryDLQ).")
@click.option("--all", "resend_all", is_flag=True, help="Re-send every message not re-sent yet.")
@click.option("-b", "--broker", "broker_name", default=None, metavar="NAME", help=_BROKER_HELP)
@pass_settings
def resend_dlq(
    settings: Settings,
    addresses: str,
    group: str,
    msg_id: str | None,
    resend_all: bool,
    broker_name: str | None,
) -> None:
    """Re-send DLQ messages of a group to their original topic as fresh messages (properties
    kept, reconsume count reset, DLQ_RESENT_FROM naming the DLQ message). Each DLQ message is
    re-sent once: the broker records it, so --all twice sends nothing the second time; the
    re-sent copy in the CommitLog is the record, so a failover or crash keeps it (a copy the
    new master's CommitLog lacks, of a resend that was not answered, is sent again).

    Prints {"group", "resent": [{"brokerName", "dlqMsgId", "topic", "msgId"}],
    "skipped": [{"brokerName", "dlqMsgId", "why"}]}.
    """
    if bool(msg_id) == resend_all:
        raise click.UsageError("give exactly one of --msg-id ID and --all")
    if msg_id:
        try:
            parse_msg_id(msg_id.strip())
        except RecordError:  # said before any I/O, as queryMsgById and recallMessage say it
            raise CommandError(
                f"not a message id: {msg_id!r} (32 hex digits: store host and offset)"
            ) from None

    async def work() -> dict[str, dict[str, Any]]:
        async with Admin(addresses) as admin:
            return await admin.resend_dlq(group, msg_id, broker_name)

    answers = run(work())
    resent = [{"brokerName": n, **r} for n, doc in sorted(answers.items()) for r in doc["resent"]]
    skipped = [{"brokerName": n, **r} for n, doc in sorted(answers.items()) for r in doc["skipped"]]

    def human() -> str:
        lines = [f"re-sent {len(resent)} message(s), skipped {len(skipped)}"]
        if resent:
            rows = [[r["brokerName"], r["dlqMsgId"], r["topic"], r["msgId"]] for r in resent]
            lines.append(table(["Broker Name", "DLQ Msg Id", "Topic", "New Msg Id"], rows))
        if skipped:
            rows = [[r["brokerName"], r["dlqMsgId"], r["why"]] for r in skipped]
            lines.append(table(["Broker Name", "DLQ Msg Id", "Skipped Because"], rows))
        return "\n".join(lines)

    emit(settings, {"group": group, "resent": resent, "skipped": skipped}, human)


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.%f"
    )[:-3]
