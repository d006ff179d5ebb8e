"""Controller membership and the controllers' own metadata: ADD_CONTROLLER, REMOVE_CONTROLLER,
TRANSFER_CONTROLLER_LEADER (the active controller's), CONTROLLER_GET_METADATA_INFO and
GET_CONTROLLER_CONFIG (any controller's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import msgpack

from controller.config import ControllerConfig
from controller.raft import ConfChangeRejected, ProposalDropped, TransferRejected
from controller.raft_driver import NotLeaderError, ProposalLost, RaftDriver
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused
from protocol.codes import ResponseCode
from protocol.controller_requests.membership import (
    AddController,
    RemoveController,
    TransferLeader,
)
from protocol.remoting import Frame, response
from remoting.server import Connection


class MembershipHandlers:
    def __init__(
        self, cfg: ControllerConfig, driver: RaftDriver, gate: LeadershipGate, timeout: float
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.gate = gate
        self.timeout = timeout

    def metadata_document(self) -> dict[str, Any]:
        """``getControllerMetaData``'s JSON, plus ``learners`` (ids), ``self`` (this node),
        ``commitIndex`` (this node's Raft commit index; rmq-console shows it) and ``lostLog``
        (on the leader: the members that lost entries they had acknowledged, id -> where
        their log ends now)."""
        driver = self.driver
        return {
            "group": self.cfg.group,
            "leaderId": driver.lead,
            "leaderAddress": driver.leader_address,
            "term": driver.term,
            "peers": driver.member_addresses(),
            "learners": list(driver.conf_state.learners),
            "self": driver.id,
            "commitIndex": driver.node.commit_index,
            "lostLog": driver.lost_logs(),
        }

    async def get_metadata_info(self, conn: Connection, req: Frame) -> Frame:
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(self.metadata_document()))

    async def get_controller_config(self, conn: Connection, req: Frame) -> Frame:
        doc = {
            f.name: (str(v) if isinstance(v, Path) else v)
            for f in dataclasses.fields(self.cfg)
            for v in [getattr(self.cfg, f.name)]
        }
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    async def _membership(self, req: Frame, change: Awaitable[Any]) -> Frame:
        try:
            await change
        except NotLeaderError:
            raise self.gate.redirect() from None
        except (ConfChangeRejected, TransferRejected) as exc:
            raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc)) from None
        except (ProposalDropped, ProposalLost) as exc:
            raise Refused(ResponseCode.SYSTEM_BUSY, f"{exc}; retry") from None
        except TimeoutError:
            raise Refused(ResponseCode.SYSTEM_BUSY, "did not complete in time") from None
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(self.metadata_document()))

    async def add_controller(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = AddController.parse(req.header, req.body)
        node_id, address = ask.node_id, ask.address
        # A joining node catches up before it is promoted: allow it more than one write.
        timeout = max(10.0, 3 * self.timeout)
        return await self._membership(req, self.driver.add_member(node_id, address, timeout))

    async def remove_controller(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        node_id = RemoveController.parse(req.header, req.body).node_id
        if node_id not in self.driver.conf_state.members():
            raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, f"{node_id} is not a member")
        return await self._membership(req, self.driver.remove_member(node_id, self.timeout))

    async def transfer_leader(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        target = TransferLeader.parse(req.header, req.body).node_id
        return await self._membership(
            req, self.driver.transfer_leadership(target, max(self.timeout, 5.0))
        )
