"""The SyncStateSet: CONTROLLER_ALTER_SYNC_STATE_SET (1001) from a group's master, and
CONTROLLER_GET_SYNC_STATE_DATA (1006), which needs liveness and so is the active controller's.
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack

from controller.documents import sync_state_document
from controller.metadata import BrokerLiveTable, ReplicasInfoManager
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, answer_of
from protocol.codes import ResponseCode
from protocol.controller_requests.groups import (
    AlterSyncStateSet,
    AlterSyncStateSetAnswer,
    GetSyncStateData,
)
from protocol.remoting import Frame, response
from remoting.server import Connection


class SyncStateHandlers:
    def __init__(
        self,
        manager: ReplicasInfoManager,
        live: BrokerLiveTable,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        now_ms: Callable[[], int],
    ) -> None:
        self.manager = manager
        self.live = live
        self.gate = gate
        self.committer = committer
        self.now_ms = now_ms

    async def alter_sync_state_set(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = AlterSyncStateSet.parse(req.header, req.body)
        await self.gate.barrier()  # "the set already is this one" is answered from current state
        d = self.manager.alter_sync_state_set(
            ask.broker_name,
            ask.master_broker_id,
            ask.master_epoch,
            ask.sync_state_set,
            ask.sync_state_set_epoch,
            self.live.alive_predicate(self.now_ms()),
        )
        r = answer_of(await self.committer.settle(d))
        header, body = AlterSyncStateSetAnswer(
            sync_state_set=r.sync_state_set, sync_state_set_epoch=r.sync_state_set_epoch
        ).encode()
        return response(req, ResponseCode.SUCCESS, header, body)

    async def get_sync_state_data(self, conn: Connection, req: Frame) -> Frame:
        name = GetSyncStateData.parse(req.header, req.body).broker_name
        await self.gate.require_active()  # liveness is known to the active controller only
        await self.gate.barrier()
        found = self.manager.get_sync_state_data([name]).response or {}
        info = found.get(name)
        if info is None:
            raise Refused(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker set {name} has no metadata",
            )
        doc = sync_state_document(info, self.live.alive_predicate(self.now_ms()))
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))
