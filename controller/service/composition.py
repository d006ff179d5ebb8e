"""The controller service: every request of docs/protocol.md "Controller requests".

Request handling (the decisions are the state machine's, :mod:`controller.metadata`):

- writes (1012, 1013, 1003, 1002, 1001, 1011, and the membership requests) are served by the
  active controller only: validated against applied state, the event appended to the Raft log,
  the answer given once it is applied (``Decision.settle``). A follower answers
  CONTROLLER_NOT_LEADER (2007) with ``leaderAddress`` when it knows the leader;
- BROKER_HEARTBEAT (904) feeds the active controller's BrokerLiveTable; the connection it came
  on closing makes the broker inactive at once;
- GET_SYNC_STATE_DATA (1006) needs liveness, so the active controller answers it, after a
  read-index barrier; GET_REPLICA_INFO (1004) and the routes (105, 106) are answered by any
  controller: the leader after a read-index barrier (linearizable), a follower from what it has
  applied;
- a scan every ``scan_interval_ms`` (and at once after a broker turned inactive or alive) runs
  the elections ``elections_needed`` asks for; after any master change the active controller
  pushes NOTIFY_BROKER_ROLE_CHANGED (1008) to every broker of the group (best effort: brokers
  also poll with 1004);
- REGISTER_BROKER (103) fills the route table (soft state) on every controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import structlog

from controller.config import ControllerConfig
from controller.documents import (
    group_body,
    group_header,
    info_body,
    info_header,
    role_notification,
    sync_state_document,
)
from controller.metadata import (
    Applied,
    BrokerBindings,
    BrokerLiveTable,
    Decision,
    ReplicaInfo,
    elections_needed,
    encode_event,
)
from controller.metadata.events import MAX_ID, check_queues, check_topic
from controller.metrics import ControllerMetrics
from controller.raft import ConfChangeRejected, ProposalDropped, Role, TransferRejected
from controller.raft_driver import DriverStopped, NotLeaderError, ProposalLost, RaftDriver
from controller.routes import RouteTable
from controller.state_machine import MetadataStateMachine
from protocol.codes import ControllerCode, RequestCode, ResponseCode, code_name
from protocol.fields import FieldError, opt_int, opt_str, req_int, req_str
from protocol.remoting import Frame, Header, Scalar, response
from remoting.client import ConnectionPool
from remoting.errors import RemotingError
from remoting.server import Connection, RemotingServer, error_response

log = structlog.get_logger(__name__)

R = TypeVar("R")
AsyncHandler = Callable[[Connection, Frame], Awaitable[Frame]]

_CID = "controller.connection_id"


class Refused(Exception):
    """Answer the request with ``code`` now (raised anywhere inside a handler)."""

    def __init__(self, code: int, remark: str, header: Header | None = None) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
        self.header = header or {}


def _opt_bool(header: Mapping[str, Scalar], name: str) -> bool:
    value = header.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FieldError(f"header field {name!r} must be true or false")
    return value


def _unpack_body(req: Frame) -> dict[str, Any]:
    if not req.body:
        return {}
    try:
        doc = msgpack.unpackb(req.body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise Refused(
            ResponseCode.CONTROLLER_INVALID_REQUEST, f"undecodable body: {type(exc).__name__}"
        ) from None
    if not isinstance(doc, dict):
        raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, "body must be a map")
    return doc


def _id_list(value: Any, what: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, f"{what} must be a list of ints")
    return frozenset(value)


def _bounded(header: Mapping[str, Scalar], name: str, lo: int, hi: int) -> int:
    """An optional int header field (0 when absent) that must lie in [lo, hi]."""
    value = opt_int(header, name, 0)
    if not lo <= value <= hi:
        raise Refused(
            ResponseCode.CONTROLLER_INVALID_REQUEST, f"{name} must be in [{lo}, {hi}], not {value}"
        )
    return value


class ControllerService:
    def __init__(
        self,
        cfg: ControllerConfig,
        driver: RaftDriver,
        state_machine: MetadataStateMachine,
        metrics: ControllerMetrics | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cfg = cfg
        self.driver = driver
        self.sm = state_machine
        self.manager = state_machine.manager
        self.metrics = metrics
        self._clock = clock
        self.live = BrokerLiveTable(default_timeout_ms=cfg.broker_heartbeat_timeout_ms)
        self.bindings = BrokerBindings()
        self.routes = RouteTable(expiry_ms=cfg.route_expiry_ms)
        self.pool = ConnectionPool(connect_timeout=cfg.notify_timeout_ms / 1000)
        self._timeout = cfg.request_timeout_ms / 1000
        self._conn_ids = itertools.count(1)
        self._in_flight: set[str] = set()
        self._scan_now = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._scan_task: asyncio.Task[None] | None = None
        driver.on_active_change.append(self._active_changed)
        state_machine.on_master_changed.append(self._master_changed)
        state_machine.on_cleaned.append(self._cleaned)
        state_machine.on_topic_changed.append(self._topic_changed)
        self._reconciling: set[tuple[str, str]] = set()

    # --- wiring ----------------------------------------------------------------------------

    def register(self, server: RemotingServer) -> None:
        handlers: dict[int, AsyncHandler] = {
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self.get_next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self.register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self.elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self.get_metadata_info,
            RequestCode.CLEAN_BROKER_DATA: self.clean_broker_data,
            RequestCode.REGISTER_BROKER: self.register_routes,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.update_topic,
            ControllerCode.GET_CONTROLLER_CONFIG: self.get_controller_config,
            ControllerCode.ADD_CONTROLLER: self.add_controller,
            ControllerCode.REMOVE_CONTROLLER: self.remove_controller,
            ControllerCode.TRANSFER_CONTROLLER_LEADER: self.transfer_leader,
        }
        for code, handler in handlers.items():
            server.register(code, self._guarded(handler))
        server.register(RequestCode.BROKER_HEARTBEAT, self.broker_heartbeat)
        server.on_open.append(self._connection_opened)
        server.on_close.append(self._connection_closed)

    async def start(self) -> None:
        self._scan_task = asyncio.create_task(self._scan_loop(), name="controller-scan")

    async def stop(self) -> None:
        tasks = [t for t in (self._scan_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._scan_task = None
        self.pool.close()

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _guarded(self, handler: AsyncHandler) -> Callable[[Connection, Frame], Awaitable[Frame]]:
        async def run(conn: Connection, req: Frame) -> Frame:
            try:
                resp = await handler(conn, req)
            except Refused as refused:
                resp = response(req, refused.code, {"remark": refused.remark, **refused.header})
            except DriverStopped:
                resp = error_response(
                    req, ResponseCode.SERVICE_NOT_AVAILABLE, "controller is stopping"
                )
            self._count(req, resp)
            return resp

        return run

    def _count(self, req: Frame, resp: Frame) -> None:
        if self.metrics is not None:
            try:
                request = RequestCode(req.code).name
            except ValueError:
                try:
                    request = ControllerCode(req.code).name
                except ValueError:
                    request = str(req.code)
            self.metrics.requests.labels(request=request, code=code_name(resp.code)).inc()

    # --- leadership ------------------------------------------------------------------------

    def _redirect(self) -> Refused:
        lead = self.driver.lead
        header: Header = {}
        address = self.driver.leader_address
        if lead is not None and lead != self.driver.id and address:
            header["leaderAddress"] = address
            remark = f"{self.driver.id} is not the active controller; the leader is {lead}"
        else:
            remark = f"{self.driver.id} is not the active controller; no leader known"
        return Refused(ResponseCode.CONTROLLER_NOT_LEADER, remark, header)

    async def _require_active(self) -> None:
        """Return on the active controller; a leader that has not applied its term's first
        entry yet is waited for briefly. Refused with 2007 elsewhere."""
        driver = self.driver
        if driver.active:
            return
        if driver.role is Role.LEADER:
            with contextlib.suppress(TimeoutError):
                await driver.wait_for(
                    lambda: driver.active or driver.role is not Role.LEADER, self._timeout
                )
            if driver.active:
                return
        raise self._redirect()

    async def _barrier(self) -> None:
        """Linearizable read on the leader: wait until applied state covers every write
        committed before now."""
        try:
            await self.driver.read_index(self._timeout)
        except (NotLeaderError, TimeoutError):
            raise Refused(
                ResponseCode.SYSTEM_BUSY, "read barrier not confirmed by a quorum; retry"
            ) from None

    async def _settle(self, decision: Decision[R]) -> Decision[R]:
        """Append the decision's event, wait until it is applied, and settle the decision."""
        if not decision.events:
            return decision
        data = encode_event(decision.events[0])
        try:
            outcome = await self.driver.propose(data, self._timeout)
        except NotLeaderError:
            raise self._redirect() from None
        except (ProposalDropped, ProposalLost) as exc:
            raise Refused(ResponseCode.SYSTEM_BUSY, f"not committed: {exc}; retry") from None
        except TimeoutError:
            if not self.driver.active:
                raise self._redirect() from None
            raise Refused(
                ResponseCode.SYSTEM_BUSY, "the Raft log did not commit in time; retry"
            ) from None
        assert isinstance(outcome, Applied)
        return decision.settle([outcome])

    def _alive(self) -> Callable[[str, int], bool]:
        return self.live.alive_predicate(self.now_ms())

    @staticmethod
    def _refuse(decision: Decision[Any]) -> Refused:
        return Refused(decision.code, decision.remark or code_name(decision.code))

    # --- broker id and registration --------------------------------------------------------

    async def get_next_broker_id(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        h = req.header
        d = self.manager.get_next_broker_id(req_str(h, "clusterName"), req_str(h, "brokerName"))
        if not d.ok or d.response is None:
            raise self._refuse(d)
        return response(req, ResponseCode.SUCCESS, {"nextBrokerId": d.response.next_broker_id})

    async def apply_broker_id(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        h = req.header
        d = self.manager.apply_broker_id(
            req_str(h, "clusterName"),
            req_str(h, "brokerName"),
            req_int(h, "appliedBrokerId"),
            opt_str(h, "registerCheckCode"),
            opt_str(h, "brokerAddress"),
        )
        d = await self._settle(d)
        if not d.ok:
            raise self._refuse(d)
        return response(req, ResponseCode.SUCCESS)

    async def register_broker(self, conn: Connection, req: Frame) -> Frame:
        """CONTROLLER_REGISTER_BROKER: binds the broker id to this connection (BrokerBindings);
        another connection may take it over only with the register code or once the holder is
        gone, so a forged registration cannot move a live broker's address."""
        await self._require_active()
        h = req.header
        name = req_str(h, "brokerName")
        broker_id = req_int(h, "brokerId")
        code = opt_str(h, "registerCheckCode") or None
        if code is None and self.cfg.require_register_check_code:
            raise Refused(
                ResponseCode.CONTROLLER_INVALID_REQUEST,
                "registerCheckCode is required (require_register_check_code)",
            )
        d = self.manager.register_broker(
            req_str(h, "clusterName"),
            name,
            broker_id,
            req_str(h, "brokerAddress"),
            alive=self._alive(),
            register_code=code,
        )
        if not d.ok:
            raise self._refuse(d)
        cid = self._connection_id(conn)
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
        d = await self._settle(d)
        if not d.ok or d.response is None:
            raise self._refuse(d)
        self.bindings.bind(name, broker_id, cid, self.now_ms())
        r = d.response
        header = group_header(
            master_broker_id=r.master_broker_id,
            master_address=r.master_address,
            master_epoch=r.master_epoch,
            sync_state_set_epoch=r.sync_state_set_epoch,
        )
        header["brokerId"] = r.broker_id
        info = self.manager.replica_info(name)
        body = group_body(r.sync_state_set, info.replicas if info is not None else ())
        return response(req, ResponseCode.SUCCESS, header, body)

    def broker_heartbeat(self, conn: Connection, req: Frame) -> Frame:
        """BROKER_HEARTBEAT: answered at once (no Raft round trip); may be oneway."""
        try:
            resp = self._heartbeat(conn, req)
        except Refused as refused:
            resp = response(req, refused.code, {"remark": refused.remark, **refused.header})
        self._count(req, resp)
        return resp

    def _heartbeat(self, conn: Connection, req: Frame) -> Frame:
        driver = self.driver
        # The answer extends the broker's write lease: only a leader whose lease a quorum
        # confirmed may give it, never one that merely believes it leads (a deposed leader
        # just thawed from SIGSTOP still does).
        if not driver.holds_lease():
            if driver.role is Role.LEADER:
                raise Refused(
                    ResponseCode.CONTROLLER_NOT_LEADER,
                    f"{driver.id} holds no leader lease confirmed by a quorum; retry",
                )
            raise self._redirect()
        h = req.header
        name = req_str(h, "brokerName")
        broker_id = req_int(h, "brokerId")
        figures = {
            key: _bounded(h, key, 0, MAX_ID)
            for key in ("epoch", "maxOffset", "confirmOffset", "electionPriority")
        }
        # A broker may ask for its own timeout, within the configured bound: a huge one must
        # not keep a dead broker (and its master role) alive.
        timeout_ms = min(
            _bounded(h, "heartbeatTimeoutMillis", -MAX_ID, MAX_ID),
            self.cfg.broker_heartbeat_timeout_max_ms,
        )
        info = self.manager.replica_info(name)
        unknown = info is None or all(r.broker_id != broker_id for r in info.replicas)
        if unknown and driver.active:  # a new leader's applied state may still be behind
            return error_response(
                req,
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {broker_id} of {name} is not registered",
            )
        if self.bindings.holder(name, broker_id) != self._connection_id(conn):
            # Only the connection that registered the broker (CONTROLLER_REGISTER_BROKER) speaks
            # for it; a broker told so registers again on its connection.
            return error_response(
                req,
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"broker {broker_id} of {name} is not registered on this connection "
                f"with {driver.id}: send CONTROLLER_REGISTER_BROKER first",
            )
        revived = self.live.on_heartbeat(
            cluster=opt_str(h, "clusterName"),
            broker_name=name,
            broker_id=broker_id,
            address=opt_str(h, "brokerAddress"),
            now_ms=self.now_ms(),
            epoch=figures["epoch"],
            max_offset=figures["maxOffset"],
            confirm_offset=figures["confirmOffset"],
            election_priority=figures["electionPriority"],
            timeout_ms=max(timeout_ms, 0),
            connection_id=self._connection_id(conn),
        )
        if revived:
            log.info("broker alive", broker_name=name, broker_id=broker_id)
            self._scan_now.set()
        return response(req, ResponseCode.SUCCESS)

    # --- elections and the SyncStateSet ----------------------------------------------------

    async def elect_master(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        h = req.header
        name = req_str(h, "brokerName")
        designated: int | None = None
        if _opt_bool(h, "designateElect"):
            designated = req_int(h, "brokerId")
        d = self.manager.elect_master(
            name,
            alive_replicas=self.live.election_view(name, self.now_ms()),
            designated_broker_id=designated,
            enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
        )
        settled = await self._settle(d)
        self._count_election(name, settled, "admin" if designated is not None else "request")
        info = settled.response
        if info is None:
            raise self._refuse(settled)
        header = info_header(info)
        if settled.remark and not settled.ok:
            header["remark"] = settled.remark
        return response(req, settled.code, header, info_body(info))

    async def alter_sync_state_set(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        h = req.header
        body = _unpack_body(req)
        if "syncStateSet" not in body:
            raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, "body needs syncStateSet")
        members = _id_list(body["syncStateSet"], "syncStateSet")
        ss_epoch = body.get("syncStateSetEpoch")
        if type(ss_epoch) is not int:
            raise Refused(
                ResponseCode.CONTROLLER_INVALID_REQUEST, "body needs syncStateSetEpoch (int)"
            )
        await self._barrier()  # "the set already is this one" is answered from current state
        d = self.manager.alter_sync_state_set(
            req_str(h, "brokerName"),
            req_int(h, "masterBrokerId"),
            req_int(h, "masterEpoch"),
            members,
            ss_epoch,
            self._alive(),
        )
        d = await self._settle(d)
        if not d.ok or d.response is None:
            raise self._refuse(d)
        r = d.response
        packed: bytes = msgpack.packb({"syncStateSet": sorted(r.sync_state_set)})
        return response(
            req, ResponseCode.SUCCESS, {"syncStateSetEpoch": r.sync_state_set_epoch}, packed
        )

    async def clean_broker_data(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        h = req.header
        ids_text = opt_str(h, "brokerIds")
        ids: set[int] = set()
        for part in ids_text.split(";"):
            part = part.strip()
            if not part:
                continue
            if not part.lstrip("-").isdigit():
                raise Refused(
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"brokerIds must be ids separated by ';', not {ids_text!r}",
                )
            ids.add(int(part))
        now = self.now_ms()
        d = self.manager.clean_broker_data(
            opt_str(h, "clusterName") or None,
            req_str(h, "brokerName"),
            frozenset(ids) or None,
            # Alive unless declared dead: a new leader in its grace period cleans nobody.
            alive=lambda name, broker_id: not self.live.declared_dead(name, broker_id, now),
            clean_living_broker=_opt_bool(h, "cleanLivingBroker"),
        )
        d = await self._settle(d)
        if not d.ok:
            raise self._refuse(d)
        return response(req, ResponseCode.SUCCESS)

    # --- reads -----------------------------------------------------------------------------

    async def _read_view(self) -> None:
        """The leader serves reads after a read-index barrier; a follower from its state."""
        if self.driver.role is Role.LEADER:
            await self._require_active()
            await self._barrier()

    async def get_replica_info(self, conn: Connection, req: Frame) -> Frame:
        name = req_str(req.header, "brokerName")
        await self._read_view()
        d = self.manager.get_replica_info(name)
        if not d.ok or d.response is None:
            raise self._refuse(d)
        return response(req, ResponseCode.SUCCESS, info_header(d.response), info_body(d.response))

    async def get_sync_state_data(self, conn: Connection, req: Frame) -> Frame:
        name = req_str(req.header, "brokerName")
        await self._require_active()  # liveness is known to the active controller only
        await self._barrier()
        found = self.manager.get_sync_state_data([name]).response or {}
        info = found.get(name)
        if info is None:
            raise Refused(
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                f"broker set {name} has no metadata",
            )
        doc = sync_state_document(info, self._alive())
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    def metadata_document(self) -> dict[str, Any]:
        """``getControllerMetaData``'s JSON, plus ``learners`` (ids) and ``self`` (this node)."""
        driver = self.driver
        return {
            "group": self.cfg.group,
            "leaderId": driver.lead,
            "leaderAddress": driver.leader_address,
            "term": driver.term,
            "peers": driver.member_addresses(),
            "learners": list(driver.conf_state.learners),
            "self": driver.id,
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

    # --- routes ----------------------------------------------------------------------------

    def _master_of(self, broker_name: str) -> tuple[int | None, str | None]:
        info = self.manager.replica_info(broker_name)
        if info is None or info.master_broker_id is None:
            return None, None
        return info.master_broker_id, info.master_address

    def _accept(self) -> Callable[[str, int, str], bool]:
        """Which route registrations to believe: a broker id the state machine knows, at the
        address it knows (any address while its first CONTROLLER_REGISTER_BROKER is pending)."""
        known: dict[tuple[str, int], str] = {
            (info.broker_name, r.broker_id): r.address
            for info in self.manager.replica_infos()
            for r in info.replicas
        }

        def accept(broker_name: str, broker_id: int, address: str) -> bool:
            recorded = known.get((broker_name, broker_id))
            return recorded is not None and recorded in ("", address)

        return accept

    async def register_routes(self, conn: Connection, req: Frame) -> Frame:
        h = req.header
        body = _unpack_body(req)
        topics = body.get("topics") or {}
        if not isinstance(topics, dict):
            raise Refused(
                ResponseCode.CONTROLLER_INVALID_REQUEST, "topics must map names to queue counts"
            )
        for topic, queues in topics.items():
            # Routes are built from these: a name or count no broker could have is refused,
            # never handed to clients (a huge count would make them build huge routes).
            try:
                check_topic("topic", topic)
                check_queues(f"queues of {topic}", queues)
            except (TypeError, ValueError) as exc:
                raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc)) from None
        name = req_str(h, "brokerName")
        broker_id = req_int(h, "brokerId")
        address = req_str(h, "brokerAddress")
        info = self.manager.replica_info(name)
        recorded = info.address_of(broker_id) if info is not None else None
        if recorded and recorded != address:
            # Not the broker the controllers know by that id: it would pose as it in the routes.
            raise Refused(
                ResponseCode.CONTROLLER_BROKER_ID_INVALID,
                f"broker {broker_id} of {name} serves on {recorded}, not {address}",
            )
        self.routes.register(
            cluster=req_str(h, "clusterName"),
            broker_name=name,
            broker_id=broker_id,
            address=address,
            topics=topics,
            connection_id=self._connection_id(conn),
            now_ms=self.now_ms(),
        )
        if self.driver.active and recorded:
            self._reconcile(name, address, topics)
        return response(req, ResponseCode.SUCCESS)

    async def _route_view(self) -> None:
        # Routes stay available without a quorum: on a barrier failure the leader answers from
        # its applied state like a follower does.
        if self.driver.active:
            with contextlib.suppress(Refused):
                await self._barrier()

    async def get_route(self, conn: Connection, req: Frame) -> Frame:
        topic = req_str(req.header, "topic")
        await self._route_view()
        doc = self.routes.route(
            topic,
            self._master_of,
            self.now_ms(),
            known=self.manager.topic_queues(topic),
            accept=self._accept(),
        )
        if doc is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    async def get_cluster_info(self, conn: Connection, req: Frame) -> Frame:
        await self._route_view()
        doc = self.routes.cluster_info(self._master_of, self.now_ms(), self._accept())
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(doc))

    # --- topics ----------------------------------------------------------------------------

    async def update_topic(self, conn: Connection, req: Frame) -> Frame:
        """UPDATE_AND_CREATE_TOPIC on the controllers (a broker's updateTopic forwards it here):
        answered once the UpdateTopic event is applied, so the topic outlives the group's master;
        the group's brokers then get it pushed (``_topic_changed``)."""
        await self._require_active()
        h = req.header
        d = self.manager.update_topic(
            opt_str(h, "clusterName") or None,
            req_str(h, "brokerName"),
            req_str(h, "topic"),
            req_int(h, "queues"),
        )
        d = await self._settle(d)
        if not d.ok or d.response is None:
            raise self._refuse(d)
        r = d.response
        return response(
            req,
            ResponseCode.SUCCESS,
            {"topic": r.topic, "queues": r.queues, "brokerName": r.broker_name},
        )

    def _topic_changed(self, broker_name: str, topic: str) -> None:
        if not self.driver.active:
            return
        info = self.manager.replica_info(broker_name)
        queues = self.manager.group_topics(broker_name).get(topic)
        if info is None or queues is None:
            return
        log.info("topic updated", broker_name=broker_name, topic=topic, queues=queues)
        addresses = sorted({r.address for r in info.replicas if r.address})
        self._spawn(
            self._push_topics(addresses, {topic: queues}, self._timeout),
            f"topic-{broker_name}-{topic}",
        )

    def _reconcile(self, broker_name: str, address: str, registered: Mapping[str, int]) -> None:
        """A broker registered routes without some topic the controllers know for its group
        (it was down or a slave when the topic was created): hand it the missing ones."""
        missing = {
            topic: queues
            for topic, queues in self.manager.group_topics(broker_name).items()
            if registered.get(topic, 0) < queues
        }
        key = (broker_name, address)
        if missing and key not in self._reconciling:
            self._reconciling.add(key)

            async def push() -> None:
                try:
                    await self._push_topics([address], missing, self._timeout)
                finally:
                    self._reconciling.discard(key)

            self._spawn(push(), f"reconcile-{broker_name}")

    async def _push_topics(
        self, addresses: list[str], topics: Mapping[str, int], timeout: float
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC to each broker (best effort). A broker in controller mode
        forwards it back to the controllers, where it changes nothing, and then creates it."""

        async def push(address: str, topic: str, queues: int) -> None:
            try:
                conn = await self.pool.get(address)
                resp = await conn.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {"topic": topic, "queues": queues},
                    None,
                    timeout,
                )
                if resp.code != ResponseCode.SUCCESS:
                    log.info(
                        "topic push refused",
                        address=address,
                        topic=topic,
                        code=code_name(resp.code),
                        remark=resp.header.get("remark"),
                    )
            except (RemotingError, OSError, ValueError) as exc:
                log.debug("topic push failed", address=address, topic=topic, error=str(exc))
                self.pool.drop(address)

        await asyncio.gather(*(push(a, t, q) for a in addresses for t, q in sorted(topics.items())))

    # --- membership ------------------------------------------------------------------------

    async def _membership(self, req: Frame, change: Awaitable[Any]) -> Frame:
        try:
            await change
        except NotLeaderError:
            raise self._redirect() from None
        except (ConfChangeRejected, TransferRejected) as exc:
            raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, str(exc)) from None
        except (ProposalDropped, ProposalLost) as exc:
            raise Refused(ResponseCode.SYSTEM_BUSY, f"{exc}; retry") from None
        except TimeoutError:
            raise Refused(ResponseCode.SYSTEM_BUSY, "did not complete in time") from None
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(self.metadata_document()))

    async def add_controller(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        node_id = req_str(req.header, "id")
        address = req_str(req.header, "address")
        # A joining node catches up before it is promoted: allow it more than one write.
        timeout = max(10.0, 3 * self._timeout)
        return await self._membership(req, self.driver.add_member(node_id, address, timeout))

    async def remove_controller(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        node_id = req_str(req.header, "id")
        if node_id not in self.driver.conf_state.members():
            raise Refused(ResponseCode.CONTROLLER_INVALID_REQUEST, f"{node_id} is not a member")
        return await self._membership(req, self.driver.remove_member(node_id, self._timeout))

    async def transfer_leader(self, conn: Connection, req: Frame) -> Frame:
        await self._require_active()
        target = req_str(req.header, "id")
        return await self._membership(
            req, self.driver.transfer_leadership(target, max(self._timeout, 5.0))
        )

    # --- connections, leadership and the scan ----------------------------------------------

    def _connection_id(self, conn: Connection) -> int:
        cid = conn.attrs.get(_CID)
        if not isinstance(cid, int):
            cid = next(self._conn_ids)
            conn.attrs[_CID] = cid
        return cid

    def _connection_opened(self, conn: Connection) -> None:
        self._connection_id(conn)

    def _connection_closed(self, conn: Connection) -> None:
        cid = conn.attrs.get(_CID)
        if not isinstance(cid, int):
            return
        self.routes.connection_closed(cid)
        self.bindings.connection_closed(cid)
        inactive = self.live.on_connection_closed(cid)
        if inactive:
            log.info("broker connection closed", brokers=inactive)
            self._scan_now.set()

    def _active_changed(self, active: bool) -> None:
        if active:
            self.live.became_active(self.now_ms())
            self._scan_now.set()
        else:
            self.live.became_standby()

    def _cleaned(self, broker_name: str, broker_ids: frozenset[int] | None) -> None:
        self.live.forget(broker_name, broker_ids)
        self.routes.forget(broker_name, broker_ids)
        self.bindings.forget(broker_name, broker_ids)

    def _master_changed(self, broker_name: str) -> None:
        info = self.manager.replica_info(broker_name)
        if info is not None:
            log.info(
                "master changed",
                broker_name=broker_name,
                master=info.master_broker_id,
                master_epoch=info.master_epoch,
            )
        if self.driver.active and info is not None:
            self._spawn(self._notify(info), f"notify-{broker_name}")

    async def _notify(self, info: ReplicaInfo) -> None:
        header, body = role_notification(info)
        timeout = self.cfg.notify_timeout_ms / 1000
        topics = self.manager.group_topics(info.broker_name)
        if info.master_address and topics:
            # The new master gets the group's topics before it hears it is master, so it serves
            # them as created (not auto-created with default queues) from its first write on.
            await self._push_topics([info.master_address], topics, timeout)

        async def push(address: str) -> None:
            try:
                conn = await self.pool.get(address)
                resp = await conn.request(
                    RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body, timeout
                )
                result = "ok" if resp.code == ResponseCode.SUCCESS else "refused"
            except (RemotingError, OSError, ValueError) as exc:
                log.debug("role notification failed", address=address, error=str(exc))
                self.pool.drop(address)
                result = "unreachable"
            if self.metrics is not None:
                self.metrics.notifications.labels(result=result).inc()

        addresses = sorted({r.address for r in info.replicas if r.address})
        await asyncio.gather(*(push(a) for a in addresses))

    async def _scan_loop(self) -> None:
        interval = self.cfg.scan_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            # Not asyncio.wait_for: on 3.11 it can swallow a cancellation that races a wake-up.
            timer = loop.call_later(interval, self._scan_now.set)
            try:
                await self._scan_now.wait()
            finally:
                timer.cancel()
            self._scan_now.clear()
            try:
                self.scan()
            except Exception:
                log.exception("controller scan failed")

    def scan(self) -> None:
        """One pass: expire soft state, refresh metrics, start the elections needed."""
        now = self.now_ms()
        self.routes.expire(now)
        groups = self.manager.replica_infos()
        if self.metrics is not None:
            self.metrics.refresh_groups(groups)
            self.metrics.route_registrations.set(len(self.routes))
        if not self.driver.active:
            if self.metrics is not None:
                self.metrics.brokers_alive.set(0)
            return
        if self.metrics is not None:
            self.metrics.brokers_alive.set(
                sum(
                    1
                    for g in groups
                    for r in g.replicas
                    if self.live.is_alive(g.broker_name, r.broker_id, now)
                )
            )
        for key in self.live.expired(now):
            log.info("broker heartbeat timed out", broker_name=key[0], broker_id=key[1])
        for request in elections_needed(
            groups,
            self.live,
            now,
            enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
            in_flight=frozenset(self._in_flight),
        ):
            self._in_flight.add(request.broker_name)
            self._spawn(
                self._elect(request.broker_name, request.reason), f"elect-{request.broker_name}"
            )

    async def _elect(self, broker_name: str, reason: str) -> None:
        try:
            d = self.manager.elect_master(
                broker_name,
                alive_replicas=self.live.election_view(broker_name, self.now_ms()),
                enable_elect_unclean_master=self.cfg.enable_elect_unclean_master,
            )
            if not d.events:
                return
            log.info("electing a master", broker_name=broker_name, reason=reason)
            try:
                settled = await self._settle(d)
            except Refused as exc:
                log.warning("election not committed", broker_name=broker_name, error=exc.remark)
                return
            self._count_election(broker_name, settled, "controller")
        finally:
            self._in_flight.discard(broker_name)

    def _count_election(self, broker_name: str, d: Decision[Any], trigger: str) -> None:
        if self.metrics is None:
            return
        result = "elected" if d.ok else code_name(d.code).lower()
        self.metrics.master_elections.labels(broker_name=broker_name, result=result).inc()
        if d.ok:
            log.info("master elected", broker_name=broker_name, trigger=trigger)
