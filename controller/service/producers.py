"""Producer ids for idempotent producers: CONTROLLER_GET_PRODUCER_ID (5180,
docs/idempotence.md).

The active controller decides the id (or the epoch) against its state and answers once the
IssueProducerId event is applied; decisions are made one at a time, so two producers asking at
once never get the same id. A decision that a leader change overtook (its compare-and-set
failed when applied) is made again, a few times.
"""

from __future__ import annotations

import asyncio
from typing import Final

from controller.metadata import ReplicasInfoManager
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import answer_of, refuse
from protocol.codes import ResponseCode
from protocol.controller_requests.producers import GetProducerId, ProducerIdAnswer
from protocol.remoting import Frame, response
from remoting.server import Connection

__all__ = ["ProducerIdHandlers"]

_TRIES: Final = 3


class ProducerIdHandlers:
    def __init__(
        self, manager: ReplicasInfoManager, gate: LeadershipGate, committer: DecisionCommitter
    ) -> None:
        self.manager = manager
        self.gate = gate
        self.committer = committer
        self._lock = asyncio.Lock()

    async def get_producer_id(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = GetProducerId.parse(req.header, req.body)
        issued: tuple[int, int] | None = None
        async with self._lock:
            for attempt in range(_TRIES):
                decided = self.manager.get_producer_id(ask.producer_id)
                candidate = answer_of(decided)
                settled = await self.committer.settle(decided)
                if settled.ok:
                    issued = candidate
                    break
                if attempt == _TRIES - 1:
                    raise refuse(settled)
        assert issued is not None
        pid, epoch = issued
        header, body = ProducerIdAnswer(producer_id=pid, epoch=epoch).encode()
        return response(req, ResponseCode.SUCCESS, header, body)
