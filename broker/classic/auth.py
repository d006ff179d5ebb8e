"""The classic door's authentication on a broker with authentication on
(:func:`remoting.classic_auth.classic_authorizer` over the broker's users, with the classic
permission table of :mod:`protocol.rocketmq_remoting.acl`), refusals counted in
``rmq_broker_auth_refused_total{reason}``."""

from __future__ import annotations

from broker.auth.users import BrokerUsers
from broker.metrics import BrokerMetrics
from protocol.request_permissions import Checks
from protocol.rocketmq_remoting.acl import classic_checks
from protocol.rocketmq_remoting.frame import RemotingCommand
from remoting.classic_auth import classic_authorizer as authorizer
from remoting.classic_door import ClassicAuthorizer

__all__ = ["classic_authorizer"]


def classic_authorizer(
    users: BrokerUsers, cluster_name: str, metrics: BrokerMetrics
) -> ClassicAuthorizer:
    def checks(cmd: RemotingCommand) -> Checks:
        return classic_checks(cmd.code, cmd.ext_fields, cmd.body, cluster_name)

    return authorizer(users, checks, metrics.auth_refusal)
