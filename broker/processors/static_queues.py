"""FENCE_STATIC_QUEUE (5122, ours): a re-map asks the master of a static topic queue's group to
stop taking sends to it and to report where it ends (docs/static-topics.md, "Re-mapping").

Header ``topic``, ``queueId``, ``masterEpoch`` (the epoch the controller saw this broker master
at), ``fenceMillis`` (how long the fence holds without a committed seal). The fence is set
first, then the answer waits until everything this master accepted (its CommitLog end at the
fence) is acknowledged by every SyncStateSet member, and names ``maxOffset``: the queue's
physical max offset, which no later send can move. Refused (nothing fenced) when this broker is
not the master at that epoch, or for a bad topic name or queue id; the fence is dropped again
when the replicas do not acknowledge in time. Header ``release``: true drops a fence (a move that failed).
"""

from __future__ import annotations

import time

from broker.context import BrokerContext
from protocol.broker_requests.static_queues import FenceStaticQueue, QueueFenced
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from storage.queues import queue_id_error, topic_error


class StaticQueueProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.FENCE_STATIC_QUEUE, self.fence)

    async def fence(self, conn: Connection, req: Frame) -> Frame:
        ctx = self.ctx
        fence = FenceStaticQueue.parse(req.header, req.body)
        topic, queue_id = fence.topic, fence.queue_id
        if fence.release:
            ctx.sealed.unfence(topic, queue_id)
            return response(req, ResponseCode.SUCCESS)
        epoch, fence_ms = fence.master_epoch, fence.fence_ms
        role = ctx.role
        if not role.is_master or role.master_epoch != epoch:
            return error_response(
                req,
                ResponseCode.NOT_MASTER,
                f"broker {ctx.cfg.listen} is not the master of {ctx.cfg.broker_name} "
                f"at epoch {epoch}",
            )
        # The queue need not exist yet (its topic may still be on its way from the
        # controllers): then nothing was accepted there, its max offset is 0, and the fence
        # holds from its first send on.
        bad = topic_error(topic) or queue_id_error(queue_id)
        if bad is not None:
            return error_response(req, ResponseCode.BAD_REQUEST, bad)
        ctx.sealed.fence(topic, queue_id, time.monotonic() + fence_ms / 1000)
        # Sends are answered synchronously up to the append: every send accepted before the
        # fence is in the CommitLog below its end now.
        end = ctx.store.max_offset
        ha = ctx.ha
        if ha is not None and not await ha.wait_for_replicas(
            end, ctx.cfg.slave_ack_timeout_ms / 1000
        ):
            ctx.sealed.unfence(topic, queue_id)
            return error_response(
                req,
                ResponseCode.FLUSH_SLAVE_TIMEOUT,
                f"the SyncStateSet of {ctx.cfg.broker_name} did not acknowledge offset {end} "
                f"within {ctx.cfg.slave_ack_timeout_ms} ms",
            )
        role = ctx.role
        if not role.is_master or role.master_epoch != epoch:
            ctx.sealed.unfence(topic, queue_id)
            return error_response(
                req,
                ResponseCode.NOT_MASTER,
                f"broker {ctx.cfg.listen} stopped being the master of {ctx.cfg.broker_name}",
            )
        fenced = QueueFenced(
            max_offset=ctx.store.queue_max_offset(topic, queue_id), master_epoch=epoch
        )
        return response(req, ResponseCode.SUCCESS, *fenced.encode())
