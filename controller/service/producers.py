"""Producer ids for idempotent producers: CONTROLLER_GET_PRODUCER_ID (5180,
docs/idempotence.md).

The active controller decides the id (or the epoch) against its state and answers once the
IssueProducerId event is applied; decisions are made one at a time, so two producers asking at
once never get the same id. A decision that a leader change overtook (its compare-and-set
failed when applied) is made again, a few times.

With authentication on, the answer carries the id's tokens for the user who asked
(:mod:`protocol.producer_token`), and an id is taken up at a new epoch only by the user it was
first issued to (its owner token), refused before anything is decided.
"""

from __future__ import annotations

import asyncio
from typing import Final

from controller.metadata import ReplicasInfoManager
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, answer_of, refuse
from protocol.codes import ResponseCode
from protocol.controller_requests.producers import GetProducerId, ProducerIdAnswer
from protocol.producer_token import owner_refusal, owner_token, send_token
from protocol.remoting import Frame, response
from protocol.request_auth import VERIFIED_USER
from remoting.server import Connection

__all__ = ["ProducerIdHandlers"]

_TRIES: Final = 3


class ProducerIdHandlers:
    def __init__(
        self,
        manager: ReplicasInfoManager,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        token_key: bytes | None = None,
        *,
        require_token: bool = True,
    ) -> None:
        self.manager = manager
        self.token_key = token_key
        """The producer tokens' key (authentication on), None: no tokens."""
        self.require_token = require_token
        """A take-up needs its owner token (``require_producer_token``)."""
        self.gate = gate
        self.committer = committer
        self._lock = asyncio.Lock()

    async def get_producer_id(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = GetProducerId.parse(req.header, req.body)
        key = self.token_key
        user = req.header.get(VERIFIED_USER)
        if key is not None:
            if not isinstance(user, str):  # the guard sets it on every verified request
                raise Refused(ResponseCode.NO_PERMISSION, "the request names no verified user")
            if ask.producer_id is not None:
                why = owner_refusal(key, ask.producer_id, user, ask.owner_token, self.require_token)
                if why is not None:
                    raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, why)
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
        answer = ProducerIdAnswer(producer_id=pid, epoch=epoch)
        if key is not None and isinstance(user, str):
            answer = ProducerIdAnswer(
                producer_id=pid,
                epoch=epoch,
                token=send_token(key, pid, epoch, user),
                owner_token=owner_token(key, pid, user),
            )
        header, body = answer.encode()
        return response(req, ResponseCode.SUCCESS, header, body)
