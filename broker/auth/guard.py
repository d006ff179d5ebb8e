"""The broker's request guard: signature verified, then the user's rules for the topic or group
the request touches (:mod:`protocol.request_permissions`), refusals counted in
``rmq_broker_auth_refused_total{reason}``."""

from __future__ import annotations

import structlog

from broker.auth.users import BrokerUsers
from broker.metrics import BrokerMetrics
from protocol.acl import Decision, User
from protocol.remoting import Frame
from protocol.request_auth import Credentials
from protocol.request_permissions import authorize, broker_checks
from remoting.auth import RequestGuard

log = structlog.get_logger(__name__)


def broker_guard(
    users: BrokerUsers,
    cluster: Credentials,
    cluster_name: str,
    window_ms: int,
    metrics: BrokerMetrics,
) -> RequestGuard:
    def allowed(user: User, req: Frame, host: str) -> Decision:
        return authorize(user, broker_checks(req, cluster_name), host, req.code)

    log.info("authentication on", window_ms=window_ms)
    return RequestGuard(
        users,
        allowed,
        cluster=cluster,
        window_ms=window_ms,
        server="broker",
        on_refused=metrics.auth_refusal,
    )
