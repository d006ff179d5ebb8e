"""The broker's request guard: signature verified, then the user's rules for the topic or group
the request touches (:mod:`protocol.request_permissions`), refusals counted in
``rmq_broker_auth_refused_total{reason}``."""

from __future__ import annotations

import structlog

from broker.auth.users import BrokerUsers
from broker.metrics import BrokerMetrics
from protocol.acl import Decision, User
from protocol.codes import RequestCode
from protocol.remoting import Frame
from protocol.request_auth import Credentials
from protocol.request_permissions import authorize, broker_checks
from remoting.auth import RequestGuard

log = structlog.get_logger(__name__)


_UNCACHED_CODES = frozenset({RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP})
"""Requests whose resource is in the body."""
_MAX_CACHED = 4096


class DecisionCache:
    """The decisions of recent (user, request code, resource fields, host) combinations: the
    same producer sends to the same topic from the same host again and again. An entry holds
    the User object it was decided for and counts only while that is still the user's current
    object (a refresh of the users replaces every User, so a rule change is never missed)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[object, ...], tuple[User, Decision]] = {}

    def decide(self, user: User, req: Frame, host: str, cluster_name: str) -> Decision:
        if req.code in _UNCACHED_CODES:
            return authorize(user, broker_checks(req, cluster_name), host, req.code)
        h = req.header
        # with the header fields the broker's permission rules read (topic, consumerGroup,
        # group: protocol.request_permissions), each spelled out (a generator cost more than
        # the look-up itself)
        key = (
            user.username,
            req.code,
            host,
            h.get("topic"),
            h.get("consumerGroup"),
            h.get("group"),
        )
        hit = self._entries.get(key)
        if hit is not None and hit[0] is user:
            return hit[1]
        decision = authorize(user, broker_checks(req, cluster_name), host, req.code)
        if len(self._entries) >= _MAX_CACHED:
            self._entries.clear()
        self._entries[key] = (user, decision)
        return decision


def broker_guard(
    users: BrokerUsers,
    cluster: Credentials,
    cluster_name: str,
    window_ms: int,
    metrics: BrokerMetrics,
) -> RequestGuard:
    cache = DecisionCache()

    def allowed(user: User, req: Frame, host: str) -> Decision:
        return cache.decide(user, req, host, cluster_name)

    log.info("authentication on", window_ms=window_ms)
    return RequestGuard(
        users,
        allowed,
        cluster=cluster,
        window_ms=window_ms,
        server="broker",
        on_refused=metrics.auth_refusal,
    )
