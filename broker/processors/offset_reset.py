"""INVOKE_BROKER_TO_RESET_OFFSET (222): an operator (rmqctl resetOffsetByTime,
skipAccumulatedMessage) or a member (``Consumer.seek``) moves a consumer group's offsets of a
topic on this master while the group's members run (docs/operations.md, "Resetting offsets").

Per queue the target is the first offset stored at or after the time (the store's
SEARCH_OFFSET_BY_TIMESTAMP search), the queue's end for timestamp -1, or the offset given for
one queue (kept within the queue's min and end). Without ``isForce`` a queue whose committed
offset is already before the target keeps it (a reset by time then only rewinds, as RocketMQ's
``isForce`` false). The new offsets are committed, and reach the members three ways:

* our SDK's members are told at once over their heartbeat connections with a oneway
  RESET_CONSUMER_CLIENT_OFFSET (220): they drop what they pulled of those queues and pull from
  the new offsets;
* every member's next pull of a queue at another offset is answered PULL_OFFSET_MOVED to the
  reset offset (:mod:`broker.offset_resets`), parked pulls woken for it: how RocketMQ's classic
  clients (ali-ons ignores 220) move, as RocketMQ 5's server-side reset does;
* the group's next POP of a queue reads from the reset offset (the gRPC clients consume by
  POP): a RESET record in the revive log (:meth:`broker.pop.service.PopService.reset`), so a
  new master reads from there too, and the answer waits until it is as durable as a send; the
  deliveries in flight stay: an ack still counts, an unacked one is revived at its deadline
  through the retry topic, as RocketMQ does.

A reset asked with ``notify`` false (the items of a static topic's logical queue that do not
hold its new offset, written before the one that does) is committed and reaches POP groups, but
tells no member and leaves nothing for the next pull: the members move when the item that holds
the new offset is reset, to the logical offset its notice names.

Refusals change nothing: not the master (NOT_MASTER), an unknown topic or queue, a time in the
future (BAD_REQUEST; :data:`FUTURE_SLACK_MS` of clock difference allowed), a group that has no
offset of the topic here and no live member (SUBSCRIPTION_GROUP_NOT_EXIST), a FIFO group that
consumed the topic by POP here (OFFSET_RESET_REFUSED: its order state decides where it reads). The permission
(update or admin on the group) is the remoting guard's (protocol.request_permissions).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import NamedTuple

import structlog

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, answer_when_durable
from protocol.broker_requests.offsets import (
    FUTURE_SLACK_MS,
    TO_MAX,
    OffsetsReset,
    Outcome,
    QueueReset,
    ResetNotice,
    ResetOffset,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, request, response
from remoting.server import Connection, RemotingServer, error_response
from storage.store import PutResult

__all__ = ["OffsetResetProcessor", "reset_offsets"]

log = structlog.get_logger(__name__)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class Done(NamedTuple):
    """A reset made: per queue what was done, and the last revive-log append to await."""

    queues: dict[int, QueueReset]
    last: PutResult | None


def reset_offsets(ctx: BrokerContext, ask: ResetOffset, now_ms: int) -> Done | tuple[int, str]:
    """Move ``ask.group``'s offsets of ``ask.topic`` here (committed, kept for the group's
    next pulls, and its POP offsets through the revive log): per queue what was done and the
    last revive-log append to await (None: none), or the code and remark of a refusal
    (nothing changed then)."""
    topic, group = ask.topic, ask.group
    name = ctx.cfg.broker_name
    if not ctx.role.is_master:
        return (
            ResponseCode.NOT_MASTER,
            f"{ctx.cfg.listen} is not the master of {name}: offsets are reset on the master",
        )
    tc = ctx.topics.get(topic)
    if tc is None:
        return ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist on {name}"
    if ask.queue_id >= tc.queues:
        return (
            ResponseCode.QUEUE_NOT_EXIST,
            f"queueId {ask.queue_id} out of range 0..{tc.queues - 1} of {topic} on {name}",
        )
    if ask.offset is None and ask.timestamp > now_ms + FUTURE_SLACK_MS:
        return (
            ResponseCode.BAD_REQUEST,
            f"{_iso(ask.timestamp)} is in the future (the broker's time is {_iso(now_ms)}): "
            "no message was stored then, nothing reset",
        )
    offsets = ctx.offsets
    queues = [ask.queue_id] if ask.queue_id >= 0 else list(range(tc.queues))
    committed = {q: offsets.query(group, topic, q) for q in range(tc.queues)}
    members = ctx.groups.live(group, now_ms)
    if all(c is None for c in committed.values()) and not members:
        return (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"group {group} has no offset of {topic} on {name} and no live member: "
            "nothing to reset",
        )
    if ctx.sub_groups.get(group).consume_orderly:
        # A FIFO group consumed by POP: its queues' order state (what is out, what blocks)
        # decides where its POPs read, not an offset; RocketMQ clears it, ours is replicated
        # through the revive log and not reset here.
        order = ctx.pop.ready().order
        if any(order.queue((group, topic, q)) is not None for q in queues):
            return (
                ResponseCode.OFFSET_RESET_REFUSED,
                f"group {group} consumes {topic} in order by POP (a FIFO group): its order "
                f"state on {name} is not reset while it runs; nothing reset",
            )
    store = ctx.store
    done: dict[int, QueueReset] = {}
    for q in queues:
        low, high = store.queue_min_offset(topic, q), store.queue_max_offset(topic, q)
        outcome: Outcome = "reset"
        if ask.offset is not None:
            target = min(max(ask.offset, low), high)
            if ask.offset < low:
                outcome = "min"
            elif ask.offset > high:
                outcome = "max"
        elif ask.timestamp == TO_MAX:
            target = high
        else:
            target = store.offset_by_timestamp(topic, q, ask.timestamp)
            if target == low < high:
                outcome = "min"  # at or before the first retained message
        previous = committed[q]
        force = ask.force or ask.offset is not None
        if not force and previous is not None and previous < target:
            target, outcome = previous, "kept"
        done[q] = QueueReset(
            offset=target, previous=previous, min_offset=low, max_offset=high, outcome=outcome
        )
    moved = {q: r.offset for q, r in done.items() if r.outcome != "kept"}
    last: PutResult | None = None
    for q, offset in moved.items():  # first: the only step that may fail (the append)
        last = ctx.pop.reset(group, topic, q, offset) or last
    for q, r in done.items():
        if r.outcome != "kept":
            offsets.commit(group, topic, q, r.offset, now_ms)
            if ask.notify:  # a quiet part of a static topic's reset moves no reader yet
                ctx.offset_resets.assign(group, topic, q, r.offset)
            ctx.waiters.notify(topic, q)  # parked pulls answer the reset now
    log.info(
        "consumer offsets reset",
        group=group,
        topic=topic,
        timestamp=ask.timestamp,
        force=ask.force,
        queues={q: (r.previous, r.offset, r.outcome) for q, r in done.items()},
    )
    return Done(done, last)


class OffsetResetProcessor:
    """Serves INVOKE_BROKER_TO_RESET_OFFSET; tells our members over ``server``'s connections.

    ``foreign`` gives the ids of the connections that speak another protocol (the classic
    door's): they are not sent our notice (their members move at their next pull)."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.foreign: Callable[[], set[int]] = set
        self._server: RemotingServer | None = None
        self._opaque = 0

    def register(self, server: RemotingServer) -> None:
        self._server = server
        server.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset)

    def reset(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        ask = ResetOffset.parse(req.header, req.body)
        outcome = reset_offsets(self.ctx, ask, self.ctx.now_ms())
        if not isinstance(outcome, Done):
            return error_response(req, *outcome)
        done, last = outcome
        moved = {q: r.offset for q, r in done.items() if r.outcome != "kept"}
        logical = (
            {ask.queue_id: ask.logical_offset}
            if ask.logical_offset is not None and ask.queue_id in moved
            else {}
        )
        notified = self.notify(ask.group, ask.topic, moved, logical) if moved and ask.notify else 0
        answer = OffsetsReset(queues=done, notified=notified)
        resp = response(req, ResponseCode.SUCCESS, *answer.encode())
        # A POP group's reset is answered once its revive record is as durable as a send.
        return answer_when_durable(self.ctx, last, req, resp, "the POP offset's reset record")

    def notify(
        self, group: str, topic: str, offsets: dict[int, int], logical: dict[int, int] | None = None
    ) -> int:
        """Send the group's live members on our protocol RESET_CONSUMER_CLIENT_OFFSET (with a
        static topic's ``logical`` offsets); how many connections were told."""
        if self._server is None:
            return 0
        ctx = self.ctx
        ids = {m.connection_id for m in ctx.groups.live(group, ctx.now_ms())} - self.foreign()
        notice = ResetNotice(
            topic=topic,
            group=group,
            broker_name=ctx.cfg.broker_name,
            offsets=offsets,
            logical=logical or {},
        )
        header, body = notice.encode()
        told = 0
        for conn in list(self._server.connections):
            if id(conn) in ids and not conn.closed:
                self._opaque += 1
                conn.send(request(notice.code, self._opaque, header, body, oneway=True))
                told += 1
        return told
