"""What the console's forms change, each through the request rmqctl sends for it: updateTopic,
deleteTopic, resetOffsetByTime, skipAccumulatedMessage, resendDlq, updateSubGroup, updateUser,
updateAcl, updateStaticTopic and remapStaticTopic (sendMessage's SDK producer for a test
message). Each checks its input first and raises :class:`Refused` with one line
when it is bad, before anything is sent; it returns one line saying what was done.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from client.admin import Admin
from client.errors import ClientError
from client.lookup import id_problem
from client.offset_reset import OffsetAdmin
from client.producer import Producer
from client.resend import Resender
from protocol.acl import AclError, check_secret, check_username, make_rule, resource_pattern
from protocol.acl import user_type as parse_user_type
from protocol.broker_requests.admin import MAX_QUEUES, CreateTopic
from protocol.broker_requests.offsets import FUTURE_SLACK_MS, TO_MAX
from protocol.codes import code_name
from protocol.controller_requests.topics import DeleteSubGroup, DeleteTopic
from protocol.controller_requests.users import (
    CreateAcl,
    CreateUser,
    DeleteAcl,
    DeleteUser,
    UpdateAcl,
    UpdateUser,
)
from protocol.fields import FieldError
from protocol.message import RecordError, parse_msg_id
from protocol.retry import MAX_RETRY_TIMES, RetryConfigError, config_from_dict
from protocol.topic_attrs import parse_message_type, parse_perm, perm_text
from rmqctl.common import utc_iso
from rmqctl.controller_calls import call_controllers
from rmqctl.static_topic import apply_moves, create_static_topic
from rmqctl.topic_admin import delete_everywhere

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


def parse_attrs(perm: str, message_type: str) -> tuple[int | None, str | None]:
    """The form's permission and message type (empty: keep the topic's), else
    :class:`Refused`."""
    try:
        return (
            parse_perm(perm) if perm.strip() else None,
            parse_message_type(message_type).value if message_type.strip() else None,
        )
    except ValueError as exc:
        raise Refused(str(exc)) from None


async def create_topic(
    addresses: str,
    topic: str,
    queues: int,
    timeout: float,
    perm: int | None = None,
    message_type: str | None = None,
) -> str:
    ask = checked_topic(topic, queues)
    async with Admin(addresses, timeout) as admin:
        brokers = await admin.create_topic(ask.topic, queues, None, perm, message_type)
    what = f"{queues} queues"
    if perm is not None:
        what += f", perm {perm_text(perm)}"
    if message_type is not None:
        what += f", message type {message_type}"
    return f"topic {ask.topic} created or updated with {what} on {', '.join(brokers)}"


def where_deleted(what: str, doc: dict[str, Any], first: tuple[str, ...] = ()) -> str:
    """One line saying where ``what`` was deleted and which brokers it is still on (each with
    why: unreachable, not alive for the controllers, its refusal), from the deleteTopic or
    deleteSubGroup document (``first``: where else it was deleted, named first); the brokers
    that did not have it are not named."""
    done = [*first, *(f"{b['brokerName']} {b['address']}" for b in doc["brokers"] if b["deleted"])]
    left = [
        f"{b['brokerName']} {b['address']} ({b['remark'] or code_name(b['code'])})"
        for b in doc["brokers"]
        if not b["deleted"] and not b["absent"]
    ]
    line = f"{what} deleted from {', '.join(done) or 'no broker'}"
    if left:
        line += f"; NOT from {', '.join(left)}: delete it again once they are back"
    return line


async def delete_topic(addresses: str, topic: str) -> str:
    """deleteTopic: the controllers delete it (else the refusal is raised), then every broker;
    the line says where it is gone and which brokers still have it (a replica down or cut
    off: the controllers do not wait for one they do not hold alive)."""
    ask = checked_topic(topic)
    doc, _ = await delete_everywhere(addresses, DeleteTopic(topic=ask.topic))
    return where_deleted(f"topic {ask.topic}", doc, ("the controllers",))


async def send_test_message(
    addresses: str, topic: str, body: str, keys: str, tag: str, timeout: float
) -> str:
    ask = checked_topic(topic)
    if not body:  # the brokers refuse it (MESSAGE_ILLEGAL): said here, as bad input
        raise Refused("the body is empty: a message needs one; nothing was sent")
    async with Producer(addresses, send_deadline=timeout) as producer:
        result = await producer.send(ask.topic, body.encode(), keys=keys.strip(), tags=tag.strip())
    return f"sent {result.msg_id} to {ask.topic} ({result.broker_name} queue {result.queue_id})"


async def reset_offset(
    addresses: str, group: str, topic: str, when: int, timeout: float, *, force: bool = True
) -> str:
    """resetOffsetByTime (``when`` :data:`TO_MAX`: skipAccumulatedMessage)."""
    if not topic.strip():  # a group with no offset offers no topic to pick
        raise Refused("give the topic whose offsets to reset")
    topic = checked_topic(topic).topic
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


def dead_letter_id(msg_id: str) -> str:
    """``msg_id`` (stripped) when it has the form of a dead letter's id, its offset id in the
    DLQ (as rmqctl resendDLQ --msg-id checks it), else :class:`Refused` saying what is wrong."""
    text = msg_id.strip()
    try:
        parse_msg_id(text)
    except RecordError:
        problem = id_problem(text) or f"it has {len(text)} hex digits"
        raise Refused(
            f"not a dead letter's id: {msg_id!r}: {problem} (a dead letter's id is its offset id "
            "in the DLQ: 32 hex digits, store host and offset)"
        ) from None
    return text


async def resend_dlq(addresses: str, group: str, msg_id: str | None, timeout: float) -> str:
    if msg_id:
        msg_id = dead_letter_id(msg_id)
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
    """createAcl: a rule of ``actions`` and ``decision`` on each of ``resources``."""
    return await _put_rules(CreateAcl, addresses, username, resources, actions, decision)


async def update_user(addresses: str, username: str, secret: str, kind: str) -> str:
    """updateUser: a new secret (left empty: kept) and/or type."""
    if not secret and not kind:
        raise Refused("give a new secret or a type; nothing was changed")
    ask = UpdateUser(
        username=_acl_checked(check_username, username.strip()),
        user_type=_acl_checked(parse_user_type, kind) if kind else None,
        secret=_acl_checked(check_secret, secret) if secret else None,
    )
    await call_controllers(addresses, ask.code, *ask.encode())
    changed = " and ".join(
        w for w, on in (("secret", ask.secret), ("type", ask.user_type)) if on is not None
    )
    return f"user {ask.username} updated ({changed})"


async def update_rules(
    addresses: str, username: str, resources: str, actions: str, decision: str
) -> str:
    """updateAcl: each rule on ``resources`` replaced by one of ``actions`` and ``decision``."""
    return await _put_rules(UpdateAcl, addresses, username, resources, actions, decision)


async def _put_rules(
    request: type[CreateAcl] | type[UpdateAcl],
    addresses: str,
    username: str,
    resources: str,
    actions: str,
    decision: str,
) -> str:
    names = _names(resources)
    if not names:
        raise Refused("no resource given (e.g. Topic:Orders, Group:*, Cluster:*)")
    rules = tuple(_acl_checked(make_rule, r, _names(actions), decision or "allow") for r in names)
    ask = request(username=_acl_checked(check_username, username.strip()), rules=rules)
    await call_controllers(addresses, ask.code, *ask.encode())
    done = "created" if request is CreateAcl else "updated"
    return f"{len(rules)} rule(s) of {ask.username} {done}"


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
    ask = DeleteSubGroup(group=group, remove_dlq=remove_dlq)
    doc, _ = await delete_everywhere(addresses, ask)
    return where_deleted(f"consumer group {group}" + (" with its DLQ" if remove_dlq else ""), doc)


def group_settings(
    group: str, retry_max_times: str, retry_delays: str, consume_retry: bool, fifo: bool
) -> dict[str, object]:
    """The settings form as updateSubGroup's document, checked as the brokers check it."""
    text = retry_max_times.strip()
    if not text.isdigit() or int(text) > MAX_RETRY_TIMES:
        raise Refused(f"retry max times must be a whole number 0..{MAX_RETRY_TIMES}, not {text!r}")
    doc: dict[str, object] = {
        "groupName": group,
        "retryMaxTimes": int(text),
        "consumeRetryEnable": consume_retry,
        "consumeMessageOrderly": fifo,
    }
    if retry_delays.strip():
        doc["retryDelays"] = retry_delays.strip()
    try:
        config_from_dict(doc)
    except RetryConfigError as exc:
        raise Refused(f"bad settings for {group}: {exc}") from None
    return doc


async def update_group(
    addresses: str, doc: dict[str, object], broker_name: str | None, timeout: float
) -> str:
    """updateSubGroup: the settings on the master of every broker group (or of one)."""
    async with Admin(addresses, timeout) as admin:
        stored = await admin.update_sub_group(dict(doc), broker_name or None)
    return f"settings of {doc['groupName']} stored on {', '.join(sorted(stored))}"


def _number(text: str, what: str, low: int, high: int) -> int:
    if not text.strip().isdigit() or not low <= int(text) <= high:
        raise Refused(f"{what} must be a whole number {low}..{high}, not {text.strip()!r}")
    return int(text)


async def create_static(addresses: str, topic: str, queues: str, brokers: str) -> str:
    """updateStaticTopic: ``queues`` logical queues over ``brokers`` (';'- or ','-separated;
    empty: every group with a master)."""
    ask = checked_topic(topic)
    count = _number(queues, "logical queues", 1, MAX_QUEUES)
    names = tuple(n.strip() for n in brokers.replace(",", ";").split(";") if n.strip())
    doc = await create_static_topic(addresses, ask.topic, count, names)
    return f"static topic {ask.topic} has {len(doc['queues'])} logical queue(s)"


async def remap_static(addresses: str, topic: str, queue: str, target: str) -> str:
    """remapStaticTopic: logical queue ``queue`` of ``topic`` moved to broker group ``target``."""
    ask = checked_topic(topic)
    number = _number(queue, "logical queue", 0, MAX_QUEUES - 1)
    if not target.strip():
        raise Refused("give the broker group to move the queue to")
    await apply_moves(addresses, [(ask.topic, number, target.strip())], lone_refusal_as_is=True)
    return f"logical queue {number} of {ask.topic} moved to {target.strip()}"
