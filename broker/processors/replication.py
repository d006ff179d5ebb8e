"""Controller mode requests a broker answers: role-change pushes (a hint to poll the
controllers, never applied as such), its epoch cache, and another replica's REPAIR_RECORD
(:mod:`broker.repair.answer`)."""

from __future__ import annotations

from broker.context import BrokerContext
from broker.repair.answer import RepairProcessor
from broker.replicas_manager import ReplicasManager
from protocol.broker_requests.runtime import EpochCache, EpochCacheQuery, EpochSpan
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.groups import RoleChanged
from protocol.fields import FieldError
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response


class ReplicationProcessor:
    def __init__(self, ctx: BrokerContext, replicas: ReplicasManager | None) -> None:
        self.ctx = ctx
        self.replicas = replicas

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.role_changed)
        server.register(RequestCode.GET_BROKER_EPOCH_CACHE, self.epoch_cache)
        RepairProcessor(self.ctx.store.repairs, lambda: self.ctx.ha).register(server)

    def role_changed(self, conn: Connection, req: Frame) -> Frame:
        if self.replicas is None:
            return error_response(
                req, ResponseCode.BAD_REQUEST, "this broker runs without controllers"
            )
        # Anyone who can connect can send this: it only makes the broker ask the controllers.
        try:
            pushed: RoleChanged | None = RoleChanged.parse(req.header, req.body)
        except FieldError:  # a malformed hint is still only a hint: poll all the same
            pushed = None
        self.replicas.on_role_notification(pushed, conn.peer)
        return response(req, ResponseCode.SUCCESS)

    def epoch_cache(self, conn: Connection, req: Frame) -> Frame:
        EpochCacheQuery.parse(req.header, req.body)
        ctx = self.ctx
        store = ctx.store
        epochs: tuple[EpochSpan, ...] = ()
        confirm = store.confirm_offset
        if ctx.ha is not None:
            confirm = ctx.ha.confirm_offset
            epochs = tuple(
                EpochSpan(e.epoch, e.start_offset, e.end_offset)
                for e in ctx.ha.epoch_file.entries_with_end(store.max_offset)
            )
        role = ctx.role
        cache = EpochCache(
            broker_id=role.broker_id,
            address=ctx.cfg.listen,
            master=role.is_master,
            max_offset=store.max_offset,
            confirm_offset=confirm,
            epochs=epochs,
        )
        return response(req, ResponseCode.SUCCESS, *cache.encode())
