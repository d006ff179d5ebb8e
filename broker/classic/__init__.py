"""The classic door: RocketMQ's own remoting protocol on the broker's client port.

Classic RocketMQ clients (Java 4.x, rocketmq-client-go, the Node.js ``ali-ons``) reach this
broker at the address the controllers' NameServer door routes them to: its client port, which
tells their connections from ours on the first bytes (:mod:`remoting.classic_door`). The
processors here only translate: the typed RocketMQ header
(:mod:`protocol.rocketmq_remoting.headers`) to the broker's own services (the send service, the
pull path with its long polling, the consumer groups and offsets), and their result to
RocketMQ's answer. docs/protocol.md lists the codes served and what they map to; every other
code answers REQUEST_CODE_NOT_SUPPORTED (3) naming it.
"""

from __future__ import annotations

from broker.classic.admin import ClassicAdmin
from broker.classic.clients import ClassicClients
from broker.classic.locks import ClassicLocks
from broker.classic.offsets import ClassicOffsets
from broker.classic.pull import ClassicPull
from broker.classic.query import ClassicQuery
from broker.classic.send import ClassicSend
from broker.classic.send_back import ClassicSendBack
from broker.classic.subscriptions import ClassicSubscriptions
from broker.classic.transaction import ClassicTransactions
from broker.context import BrokerContext
from broker.processors.admin import AdminProcessor
from remoting.classic_door import ClassicDoor, auth_refusal

__all__ = ["classic_door"]


def classic_door(ctx: BrokerContext, admin: AdminProcessor) -> ClassicDoor:
    """The broker's classic door with its processors registered (``admin``: our door's, whose
    topic creation both doors use)."""
    door = ClassicDoor(
        "broker", ctx.cfg.max_frame_bytes, refusal=auth_refusal(ctx.cfg.auth_enabled)
    )
    subscriptions = ClassicSubscriptions()
    for processor in (
        ClassicClients(ctx, subscriptions),
        ClassicSend(ctx),
        ClassicPull(ctx, subscriptions),
        ClassicOffsets(ctx),
        ClassicSendBack(ctx),
        ClassicQuery(ctx),
        ClassicLocks(ctx),
        ClassicTransactions(ctx),
        ClassicAdmin(ctx, admin),
    ):
        processor.register(door)
    return door
