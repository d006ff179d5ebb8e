"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) of classic orderly consumers: the queues of a
group each member may consume alone (:class:`broker.classic.queue_locks.QueueLocks`). The answer
to a lock lists the queues the client holds now (``lockOKMQSet``); an unlock is always
SUCCESS. Only the queues of this broker's group are locked here (``brokerName`` others are
left out of the answer)."""

from __future__ import annotations

from broker.classic.queue_locks import QueueLocks
from broker.context import BrokerContext
from protocol.rocketmq_remoting.bodies import (
    decode_lock_batch,
    encode_lock_batch_answer,
)
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from remoting.classic_door import ClassicDoor, ClassicSession

__all__ = ["ClassicLocks"]


class ClassicLocks:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.locks = QueueLocks()

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.LOCK_BATCH_MQ, self.lock)
        door.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock)

    def lock(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        ask = decode_lock_batch(req.body)
        mine = [q for q in ask.queues if q.broker_name == self.ctx.cfg.broker_name]
        held = set(
            self.locks.lock(
                ask.consumer_group,
                ask.client_id,
                [(q.topic, q.queue_id) for q in mine],
                self.ctx.now_ms(),
            )
        )
        locked = [q for q in mine if (q.topic, q.queue_id) in held]
        return make_response(req, ResponseCode.SUCCESS, body=encode_lock_batch_answer(locked))

    def unlock(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        ask = decode_lock_batch(req.body)
        self.locks.unlock(
            ask.consumer_group, ask.client_id, [(q.topic, q.queue_id) for q in ask.queues]
        )
        return make_response(req, ResponseCode.SUCCESS)
