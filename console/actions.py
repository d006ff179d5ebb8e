"""What the console's forms change, each through the request rmqctl sends for it: updateTopic,
deleteTopic, resetOffsetByTime, skipAccumulatedMessage, resendDlq (sendMessage's SDK producer
for a test message). Each checks its input first and raises :class:`Refused` with one line
when it is bad, before anything is sent; it returns one line saying what was done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from client.admin import Admin
from client.errors import ClientError
from client.offset_reset import OffsetAdmin
from client.producer import Producer
from client.resend import Resender
from protocol.acl import AclError, check_secret, check_username, make_rule, resource_pattern
from protocol.acl import user_type as parse_user_type
from protocol.broker_requests.admin import MAX_QUEUES, CreateTopic
from protocol.broker_requests.offsets import FUTURE_SLACK_MS, TO_MAX
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import DeleteSubGroup, DeleteTopic
from protocol.controller_requests.users import CreateAcl, CreateUser, DeleteAcl, DeleteUser
from protocol.fields import FieldError
from rmqctl.common import utc_iso
from rmqctl.controller_calls import call_controllers
from rmqctl.topic_admin import ask_delete, delete_doc, failed_brokers

T = TypeVar("T")


class Refused(ClientError):
    """Bad input to a form: nothing was sent."""


def checked_topic(topic: str, queues: int | None = None) -> CreateTopic:
    """The topic (and queue count) as the brokers check them, else :class:`Refused`."""
    try:
        return CreateTopic.parse(*CreateTopic(topic=topic.strip(), queues=queues).encode())
    except FieldError as exc:
        raise Refused(f"bad topic {topic!r}: {exc}") from None


def parse_queues(text: str) -> int:
    try:
        queues = int(text)
    except ValueError:
        raise Refused(f"queues must be a number 1..{MAX_QUEUES}, got {text!r}") from None
    if not 1 <= queues <= MAX_QUEUES:
        raise Refused(f"queues must be 1..{MAX_QUEUES}, got {queues}")
    return queues


async def create_topic(addresses: str, topic: str, queues: int, timeout: float) -> str:
    ask = checked_topic(topic, queues)
    async with Admin(addresses, timeout) as admin:
        brokers = await admin.create_topic(ask.topic, queues)
    return f"topic {ask.topic} created or updated with {queues} queues on {', '.join(brokers)}"


async def delete_topic(addresses: str, topic: str) -> str:
    ask = checked_topic(topic)
    doc = delete_doc(
        "topic",
        await ask_delete(addresses, DeleteTopic(topic=ask.topic)),
        ResponseCode.TOPIC_NOT_EXIST,
    )
    failed = failed_brokers(doc)
    if failed:
        raise ClientError(
            f"topic {ask.topic} is deleted from the controllers but still on {', '.join(failed)}: "
            "delete it again once they are back"
        )
    return f"topic {ask.topic} deleted"


async def send_test_message(
    addresses: str, topic: str, body: str, keys: str, tag: str, timeout: float
) -> str:
    ask = checked_topic(topic)
    async with Producer(addresses, send_deadline=timeout) as producer:
        result = await producer.send(ask.topic, body.encode(), keys=keys.strip(), tags=tag.strip())
    return f"sent {result.msg_id} to {ask.topic} ({result.broker_name} queue {result.queue_id})"


async def reset_offset(
    addresses: str, group: str, topic: str, when: int, timeout: float, *, force: bool = True
) -> str:
    """resetOffsetByTime (``when`` :data:`TO_MAX`: skipAccumulatedMessage)."""
    now = int(time.time() * 1000)
    if when != TO_MAX and when > now + FUTURE_SLACK_MS:
        raise Refused(
            f"{utc_iso(when)} is in the future (now is {utc_iso(now)}): nothing was stored then, "
            "nothing reset"
        )
    async with OffsetAdmin(addresses, timeout) as admin:
        report = await admin.resetter().by_time(group, topic, when, force=force)
    moved = [r for r in report.queues.values() if r.outcome != "kept"]
    to = "to the end of each queue" if when == TO_MAX else f"to {utc_iso(when)}"
    return (
        f"reset {len(moved)} of {len(report.queues)} queue(s) of {group} on {topic} {to}; "
        f"told {report.notified} member connection(s)"
    )


async def resend_dlq(addresses: str, group: str, msg_id: str | None, timeout: float) -> str:
    async with Admin(addresses, timeout) as admin:
        done = await admin.resend_dlq(group, msg_id or None)
    resent = sum(len(d.get("resent") or ()) for d in done.values())
    skipped = sum(len(d.get("skipped") or ()) for d in done.values())
    return f"re-sent {resent} dead letter(s) of {group} to their topics ({skipped} skipped)"


# --- users and rules (super users only on the cluster; rmqctl's createUser, deleteUser,
# createAcl, deleteAcl requests) -------------------------------------------------------------


def _acl_checked(check: Callable[..., T], *args: Any) -> T:
    try:
        return check(*args)
    except AclError as exc:
        raise Refused(str(exc)) from None


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


async def create_user(addresses: str, username: str, secret: str, kind: str) -> str:
    ask = CreateUser(
        username=_acl_checked(check_username, username.strip()),
        secret=_acl_checked(check_secret, secret),
        user_type=_acl_checked(parse_user_type, kind) if kind else None,
    )
    await call_controllers(addresses, ask.code, *ask.encode())
    return f"user {ask.username} created"


async def delete_user(addresses: str, username: str) -> str:
    ask = DeleteUser(username=_acl_checked(check_username, username.strip()))
    await call_controllers(addresses, ask.code, *ask.encode())
    return f"user {ask.username} and its rules deleted"


async def create_rules(
    addresses: str, username: str, resources: str, actions: str, decision: str
) -> str:
    names = _names(resources)
    if not names:
        raise Refused("no resource given (e.g. Topic:Orders, Group:*, Cluster:*)")
    rules = tuple(_acl_checked(make_rule, r, _names(actions), decision or "allow") for r in names)
    ask = CreateAcl(username=_acl_checked(check_username, username.strip()), rules=rules)
    await call_controllers(addresses, ask.code, *ask.encode())
    return f"{len(rules)} rule(s) of {ask.username} created"


async def delete_rules(addresses: str, username: str, resources: str) -> str:
    patterns = tuple(_acl_checked(resource_pattern, r) for r in _names(resources))
    ask = DeleteAcl(username=_acl_checked(check_username, username.strip()), resources=patterns)
    await call_controllers(addresses, ask.code, *ask.encode())
    return f"{', '.join(str(p) for p in patterns) or 'all'} rules of {ask.username} deleted"


async def resend_message(
    addresses: str, msg_id: str, group: str, topic: str | None, timeout: float
) -> str:
    """resendMessage: the message delivered to ``group`` again (a copy in its retry topic)."""
    if not group.strip():
        raise Refused("give the consumer group to deliver the message to")
    async with Resender(addresses, timeout) as resender:
        _, copy = await resender.resend(msg_id, group.strip(), topic=topic or None)
    return (
        f"{msg_id} delivered to {group.strip()} again: copy {copy.msg_id} in {copy.topic} "
        f"({copy.members} live member(s))"
    )


async def delete_group(addresses: str, group: str, remove_dlq: bool) -> str:
    """deleteSubGroup: the group's settings, offsets and retry topic on every broker."""
    report = await ask_delete(addresses, DeleteSubGroup(group=group, remove_dlq=remove_dlq))
    doc = delete_doc("group", report, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
    failed = failed_brokers(doc)
    if failed:
        raise ClientError(
            f"consumer group {group} is still on {', '.join(failed)}: delete it again once "
            "they are back"
        )
    return f"consumer group {group} deleted" + (" with its DLQ" if remove_dlq else "")
