"""resendMessage: deliver one stored message to a consumer group again (RocketMQ's
CONSUME_MESSAGE_DIRECTLY), through :class:`client.resend.Resender`."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from client.lookup import FoundMessage
from client.resend import Resender
from protocol.broker_requests.consume_directly import ConsumedDirectly
from rmqctl.common import (
    Settings,
    Spinner,
    addresses_option,
    emit,
    group_option,
    pass_settings,
    run,
)

_POLL = 0.2


@click.command("resendMessage", short_help="Deliver one message to a consumer group again.")
@addresses_option
@click.option(
    "-i",
    "--msg-id",
    "msg_id",
    required=True,
    metavar="MSGID",
    help="The message: its offset id, or the unique key (UNIQ_KEY) a client shows.",
)
@group_option
@click.option(
    "-t",
    "--topic",
    default=None,
    metavar="TOPIC",
    help="The topic the group consumed it from (finds a unique key faster; checked).",
)
@click.option(
    "-c",
    "--client-id",
    default="",
    metavar="CLIENTID",
    help="Refuse unless this member of the group is live (the copy still goes to the group).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Store the copy although the group has no live member now: it waits in the group's "
    "retry topic for the next member (a group that does not exist is refused all the same).",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    metavar="S",
    help="Wait up to S seconds for the group to consume the copy (0: do not wait).",
)
@pass_settings
def resend_message(
    settings: Settings,
    addresses: str,
    msg_id: str,
    group: str,
    topic: str | None,
    client_id: str,
    force: bool,
    wait_s: float,
) -> None:
    """Deliver the message MSGID to consumer GROUP again, as mqadmin's consumeMessageDirectly
    (RocketMQ's CONSUME_MESSAGE_DIRECTLY) does, then wait until the group consumed it.

    RocketMQ's broker asks one member's listener and returns its result. Our consumers have no
    listener the broker can call, so the master of the broker group that stores the message
    appends a copy to the group's retry topic (%RETRY%GROUP), which every kind of member reads
    (the SDK, POP and gRPC clients, classic push consumers): the member holding that queue
    receives it, with the message's own id, topic, keys and properties. This command then
    watches the group's offset on that queue: "consumed" means the group moved past the copy
    (a member consumed it, or sent it back; a POP group: handed it out).

    Refused (exit status 1, nothing stored): the group does not exist on that broker group
    (never configured, no member, offset or retry topic there; --force or not), it has no live
    member (unless --force) or
    none subscribing to the message's topic, --client-id is not live, the message is not one
    the group consumes, the group does not read retries (a FIFO group, or consumeRetry off),
    the broker group has no master. Not consumed within --wait is no error (exit status 0,
    "consumed": false): the copy stays for the group.

    Prints {"msgId", "group", "originTopic", "copy": {"topic", "msgId", "queueOffset"},
    "members", "consumeResult", "consumed"} with --json.
    """

    async def work() -> tuple[FoundMessage, ConsumedDirectly, bool | None]:
        async with Resender(addresses) as resender:
            async with Spinner(f"finding message {msg_id}"):
                found, copy = await resender.resend(
                    msg_id, group, topic=topic, client_id=client_id, force=force
                )
            if wait_s <= 0:
                return found, copy, None
            what = f"waiting for group {group} to consume the copy ({copy.topic} offset "
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_s
            async with Spinner(f"{what}{copy.queue_offset}, up to {wait_s:g} s)"):
                while True:
                    if await resender.consumed(found.broker_name, group, copy):
                        return found, copy, True
                    if loop.time() >= deadline:
                        return found, copy, False
                    await asyncio.sleep(min(_POLL, max(0.0, deadline - loop.time())))

    found, copy, consumed = run(work())
    doc: dict[str, Any] = {
        "msgId": found.msg_id,
        "group": group,
        "originTopic": copy.origin_topic,
        "copy": {"topic": copy.topic, "msgId": copy.msg_id, "queueOffset": copy.queue_offset},
        "members": copy.members,
        "consumeResult": copy.consume_result,
        "consumed": consumed,
    }

    def human() -> str:
        first = (
            f"resent {found.msg_id} of {copy.origin_topic} to group {group}: copy {copy.msg_id} "
            f"at {copy.topic} offset {copy.queue_offset} ({copy.members} live members)"
        )
        if consumed is None:
            return first
        if consumed:
            return first + f"\nconsumed by group {group}"
        return first + f"\nnot consumed within {wait_s:g} s: the copy stays for the group"

    emit(settings, doc, human)
