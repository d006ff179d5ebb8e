"""Broker ids and registration: CONTROLLER_GET_NEXT_BROKER_ID (1012), CONTROLLER_APPLY_BROKER_ID
(1013), CONTROLLER_REGISTER_BROKER (1003), CLEAN_BROKER_DATA (1011), and the group's metadata,
CONTROLLER_GET_REPLICA_INFO (1004).

Writes are the active controller's, answered once their event is applied. A registration binds
the broker id to its connection (BrokerBindings).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from controller.config import ControllerConfig
from controller.documents import group_metadata, metadata_answer
from controller.metadata import BrokerBindings, BrokerLiveTable, ReplicasInfoManager
from controller.service.commit import DecisionCommitter
from controller.service.connections import ConnectionIds
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, answer_of, refuse
from protocol.codes import ResponseCode
from protocol.controller_requests.brokers import (
    ApplyBrokerId,
    CleanBrokerData,
    GetNextBrokerId,
    NextBrokerIdAnswer,
    RegisterBroker,
)
from protocol.controller_requests.groups import GetReplicaInfo
from protocol.remoting import Frame, response
from remoting.server import Connection

log = structlog.get_logger(__name__)


class BrokerHandlers:
    def __init__(
        self,
        cfg: ControllerConfig,
        manager: ReplicasInfoManager,
        live: BrokerLiveTable,
        bindings: BrokerBindings,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        connections: ConnectionIds,
        now_ms: Callable[[], int],
    ) -> None:
        self.cfg = cfg
        self.manager = manager
        self.live = live
        self.bindings = bindings
        self.gate = gate
        self.committer = committer
        self.connections = connections
        self.now_ms = now_ms

    async def get_next_broker_id(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = GetNextBrokerId.parse(req.header, req.body)
        r = answer_of(self.manager.get_next_broker_id(ask.cluster, ask.broker_name))
        header, body = NextBrokerIdAnswer(next_broker_id=r.next_broker_id).encode()
        return response(req, ResponseCode.SUCCESS, header, body)

    async def apply_broker_id(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = ApplyBrokerId.parse(req.header, req.body)
        d = self.manager.apply_broker_id(
            ask.cluster,
            ask.broker_name,
            ask.broker_id,
            ask.register_check_code,
            ask.broker_address,
        )
        d = await self.committer.settle(d)
        if not d.ok:
            raise refuse(d)
        return response(req, ResponseCode.SUCCESS)

    async def register_broker(self, conn: Connection, req: Frame) -> Frame:
        """CONTROLLER_REGISTER_BROKER: binds the broker id to this connection (BrokerBindings);
        another connection may take it over only with the register code or once the holder is
        gone, so a forged registration cannot move a live broker's address."""
        await self.gate.require_active()
        ask = RegisterBroker.parse(req.header, req.body)
        name = ask.broker_name
        broker_id = ask.broker_id
        code = ask.register_check_code
        heard = self.live.alive_predicate(self.now_ms())

        def alive(group: str, member: int) -> bool:
            # The broker registering is talking to us: alive, even before this controller heard
            # its first heartbeat (a new active controller). Answering a master "no master"
            # here would tell it to step down while every controller still names it.
            return (group, member) == (name, broker_id) or heard(group, member)

        d = self.manager.register_broker(
            ask.cluster,
            name,
            broker_id,
            ask.broker_address,
            alive=alive,
            register_code=code,
        )
        if not d.ok:
            raise refuse(d)
        cid = self.connections.of(conn)
        now = self.now_ms()
        if not self.bindings.may_bind(
            name,
            broker_id,
            cid,
            code_verified=code is not None,
            alive=self.live.is_alive(name, broker_id, now),
            now_ms=now,
            hold_ms=self.cfg.broker_heartbeat_timeout_ms,
        ):
            log.warning(
                "registration refused: broker id held by another connection",
                broker_name=name,
                broker_id=broker_id,
                peer=conn.peer,
            )
            raise Refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker {broker_id} of {name} is registered from another connection and alive; "
                "register with its registerCheckCode to take it over",
            )
        if code is None and self.cfg.require_register_check_code:
            # Checked after the binding so that a live holder's id answers 2014 either way.
            raise Refused(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                "registerCheckCode is required (require_register_check_code)",
            )
        r = answer_of(await self.committer.settle(d))
        self.bindings.bind(name, broker_id, cid, self.now_ms())
        info = self.manager.replica_info(name)
        header, body = metadata_answer(
            master_broker_id=r.master_broker_id,
            master_address=r.master_address,
            master_epoch=r.master_epoch,
            sync_state_set_epoch=r.sync_state_set_epoch,
            sync_state_set=r.sync_state_set,
            replicas=info.replicas if info is not None else (),
            sealed_queues=self.manager.sealed_queues(name),
            broker_id=r.broker_id,
        ).encode()
        return response(req, ResponseCode.SUCCESS, header, body)

    async def clean_broker_data(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = CleanBrokerData.parse(req.header, req.body)
        now = self.now_ms()
        d = self.manager.clean_broker_data(
            ask.cluster,
            ask.broker_name,
            ask.broker_ids,
            # Alive unless declared dead: a new leader in its grace period cleans nobody.
            alive=lambda name, broker_id: not self.live.declared_dead(name, broker_id, now),
            clean_living_broker=ask.clean_living_broker,
        )
        d = await self.committer.settle(d)
        if not d.ok:
            raise refuse(d)
        return response(req, ResponseCode.SUCCESS)

    async def get_replica_info(self, conn: Connection, req: Frame) -> Frame:
        name = GetReplicaInfo.parse(req.header, req.body).broker_name
        await self.gate.read_view()
        info = answer_of(self.manager.get_replica_info(name))
        header, body = group_metadata(info, self.manager.sealed_queues(name)).encode()
        return response(req, ResponseCode.SUCCESS, header, body)
