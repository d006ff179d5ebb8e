"""The classic door's authentication on a broker with authentication on: RocketMQ's ACL 1.0
signature checked against our users (the access key is a username, the secret key its secret),
then the user's rules for what the request touches (:mod:`protocol.rocketmq_remoting.acl`,
the same permission table as our own door). Refusals answer NO_PERMISSION (16) with the reason,
are counted in ``rmq_broker_auth_refused_total{reason}`` and logged at most once per source
host per window, as our own door's."""

from __future__ import annotations

import time

from broker.auth.users import BrokerUsers
from broker.metrics import BrokerMetrics
from protocol.request_permissions import authorize
from protocol.rocketmq_remoting.acl import ACCESS_KEY, classic_checks, signature_refusal
from protocol.rocketmq_remoting.frame import RemotingCommand
from remoting.auth import RefusalLog, source_host
from remoting.classic_door import ClassicAuthorizer, ClassicSession

__all__ = ["classic_authorizer"]


def classic_authorizer(
    users: BrokerUsers, cluster_name: str, metrics: BrokerMetrics
) -> ClassicAuthorizer:
    refusals = RefusalLog("classic request refused", metrics.auth_refusal)

    def refused(session: ClassicSession, cmd: RemotingCommand, reason: str, remark: str) -> str:
        refusals.record(
            source_host(session.conn),
            int(time.monotonic() * 1000),
            reason,
            remark,
            peer=session.peer,
            code=cmd.code,
        )
        return remark

    def authorizer(session: ClassicSession, cmd: RemotingCommand) -> str | None:
        fields = cmd.ext_fields
        bad = signature_refusal(fields, cmd.body, users.secret)
        if bad is not None:
            return refused(session, cmd, *bad)
        user = users.user(fields[ACCESS_KEY])
        if user is None:  # removed between the two look-ups
            return refused(
                session, cmd, "unknown_user", f"unknown access key {fields[ACCESS_KEY]!r}"
            )
        checks = classic_checks(cmd.code, fields, cmd.body, cluster_name)
        decision = authorize(user, checks, source_host(session.conn), cmd.code)
        if not decision.allowed:
            return refused(session, cmd, "denied", decision.reason)
        return None

    return authorizer
