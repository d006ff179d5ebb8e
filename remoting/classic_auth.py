"""RocketMQ's ACL 1.0 signature on a classic door (:mod:`remoting.classic_door`) with
authentication on: the signature checked against a daemon's users (the access key is a
username, the secret key its secret: :mod:`protocol.rocketmq_remoting.acl`), then the user's
rules for what the request touches (the daemon's permission table). A refusal answers
NO_PERMISSION (16) with the reason, is counted by reason (``on_refused``) and logged at most
once per source host per window, as our own door's."""

from __future__ import annotations

import time
from collections.abc import Callable

from protocol.request_permissions import Checks, authorize
from protocol.rocketmq_remoting.acl import ACCESS_KEY, signature_refusal
from protocol.rocketmq_remoting.frame import RemotingCommand
from remoting.auth import RefusalLog, UserDirectory, source_host
from remoting.classic_door import ClassicAuthorizer, ClassicSession

__all__ = ["classic_authorizer"]


def classic_authorizer(
    users: UserDirectory,
    checks: Callable[[RemotingCommand], Checks],
    on_refused: Callable[[str], None] | None = None,
) -> ClassicAuthorizer:
    """``checks(request)``: what a classic request needs (the daemon's table)."""
    refusals = RefusalLog("classic request refused", on_refused)

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
            remark = f"unknown access key {fields[ACCESS_KEY]!r}"
            return refused(session, cmd, "unknown_user", remark)
        decision = authorize(user, checks(cmd), source_host(session.conn), cmd.code)
        if not decision.allowed:
            return refused(session, cmd, "denied", decision.reason)
        return None

    return authorizer
