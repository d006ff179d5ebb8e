"""GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25): a running broker's configuration, read
and changed live (:mod:`broker.live_config` decides; docs/operations.md).

UPDATE_BROKER_CONFIG is not in the permission tables (protocol/request_permissions.py): with
authentication on only a super user may send it; anyone else is answered NO_PERMISSION by the
request guard before this processor sees the request. GET_BROKER_CONFIG needs get on the cluster.
"""

from __future__ import annotations

import structlog

from broker.live_config import ConfigRefused, LiveConfig
from protocol.broker_requests.broker_config import BrokerConfigQuery, UpdateBrokerConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response

log = structlog.get_logger(__name__)


class BrokerConfigProcessor:
    def __init__(self, live: LiveConfig) -> None:
        self.live = live

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_BROKER_CONFIG, self.get_config)
        server.register(RequestCode.UPDATE_BROKER_CONFIG, self.update_config)

    def get_config(self, conn: Connection, req: Frame) -> Frame:
        BrokerConfigQuery.parse(req.header, req.body)
        return response(req, ResponseCode.SUCCESS, *self.live.table().encode())

    def update_config(self, conn: Connection, req: Frame) -> Frame:
        update = UpdateBrokerConfig.parse(req.header, req.body)
        try:
            changed = self.live.update(update.key, update.value, conn.peer)
        except ConfigRefused as refused:
            log.warning("config change refused", key=update.key, peer=conn.peer, why=refused.remark)
            return error_response(req, refused.code, refused.remark)
        log.warning(
            "config changed live",
            key=changed.key,
            old=changed.old,
            new=changed.new,
            start_value=changed.start_value,
            live_file=changed.live_file,
            peer=conn.peer,
        )
        return response(req, ResponseCode.SUCCESS, *changed.encode())
