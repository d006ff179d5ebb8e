"""Consumer groups' retry settings: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) and GET_SUBSCRIPTIONGROUP_CONFIG (352).

Settings are changed on a group's master only; its slaves copy them (with the DLQ resend
ledger) in the periodic config sync, so a new master after a failover applies the same ones.
The request body is a msgpack map of :data:`protocol.retry.FIELDS`; keys left out keep their
current value. A bad key or value is answered BAD_REQUEST and nothing is stored.
"""

from __future__ import annotations

from typing import Any

import msgpack

from broker.context import BrokerContext
from broker.processors.clients import ensure_retry_topic
from protocol.broker_requests.subscription_groups import (
    AllSubscriptionGroupsQuery,
    SubscriptionGroupQuery,
    SubscriptionGroupTable,
    SubscriptionGroupUpdate,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from protocol.retry import RetryConfigError, SubscriptionGroupConfig
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError


class SubscriptionGroupProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update)
        server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.get_all)
        server.register(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, self.get_one)

    def update(self, conn: Connection, req: Frame) -> Frame:
        doc = dict(SubscriptionGroupUpdate.parse(req.header, req.body).settings)
        outcome = update_group(self.ctx, doc)
        if not isinstance(outcome, SubscriptionGroupConfig):
            return error_response(req, *outcome)
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(outcome.to_dict()))

    def get_one(self, conn: Connection, req: Frame) -> Frame:
        group = SubscriptionGroupQuery.parse(req.header, req.body).group
        config = self.ctx.sub_groups.configured(group)
        if config is None:
            return error_response(
                req,
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group {group} is not configured on {self.ctx.cfg.broker_name} "
                "(it has the defaults)",
            )
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(config.to_dict()))

    def get_all(self, conn: Connection, req: Frame) -> Frame:
        """``{"subscriptionGroupTable": {group: settings}, "dlqResent": {group: [offsets]},
        "dlqResentCovered": offset}`` (slaves copy them)."""
        AllSubscriptionGroupsQuery.parse(req.header, req.body)
        ctx = self.ctx
        table = SubscriptionGroupTable(
            groups={g: c.to_dict() for g, c in ctx.sub_groups.all().items()},
            dlq_resent={g: tuple(o) for g, o in ctx.dlq_resent.snapshot().items()},
            dlq_resent_covered=ctx.dead_letters.covered(),
        )
        return response(req, ResponseCode.SUCCESS, *table.encode())


def update_group(
    ctx: BrokerContext, doc: dict[str, Any]
) -> SubscriptionGroupConfig | tuple[int, str]:
    """Store a group's settings on the master (both doors' UPDATE_AND_CREATE_SUBSCRIPTIONGROUP):
    the stored settings, or the code and remark to answer (nothing stored then)."""
    if not ctx.role.is_master:
        return (
            ResponseCode.NOT_MASTER,
            f"broker {ctx.cfg.listen} is not the master of {ctx.cfg.broker_name}: "
            "update subscription groups on the master (slaves copy them)",
        )
    try:
        config = ctx.sub_groups.update(doc)
    except RetryConfigError as exc:
        return ResponseCode.BAD_REQUEST, str(exc)
    except StoreError as exc:
        return ResponseCode.SYSTEM_ERROR, f"not stored: {exc}"
    ensure_retry_topic(ctx, config.group, config)
    return config
