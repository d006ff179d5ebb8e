"""What each request needs (protocol/request_permissions.py), decided over a user's rules."""

from __future__ import annotations

import msgpack
import pytest

from protocol.acl import User, UserType, make_rule
from protocol.codes import ControllerCode, RequestCode
from protocol.remoting import Header, request
from protocol.request_permissions import (
    SUPER_ONLY_CONTROLLER_CODES,
    authorize,
    broker_checks,
    controller_checks,
)

PUB_A = User("app", UserType.NORMAL, (make_rule("Topic:A", ["pub"], "allow"),))
ADMIN = User("root", UserType.SUPER)


def on_broker(
    user: User, code: int, header: Header, body: bytes | None = None, ip: str = "10.0.0.1"
) -> bool:
    req = request(code, 1, header, body)
    return authorize(user, broker_checks(req, "DefaultCluster"), ip, code).allowed


def test_pub_on_a_sends_to_a_only_and_cannot_consume_it() -> None:
    assert on_broker(PUB_A, RequestCode.SEND_MESSAGE, {"topic": "A"})
    assert on_broker(PUB_A, RequestCode.SEND_BATCH_MESSAGE, {"topic": "A"})
    assert not on_broker(PUB_A, RequestCode.SEND_MESSAGE, {"topic": "B"})
    pull = {"topic": "A", "consumerGroup": "g", "queueId": 0}
    assert not on_broker(PUB_A, RequestCode.PULL_MESSAGE, pull)
    assert not on_broker(PUB_A, RequestCode.POP_MESSAGE, pull)
    # The route of A: pub suffices (any of pub, sub, get).
    assert on_broker(PUB_A, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "A"})
    assert not on_broker(PUB_A, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "B"})


def test_consuming_needs_sub_on_the_topic_and_the_group() -> None:
    topic_only = User("c", UserType.NORMAL, (make_rule("Topic:A", ["sub"], "allow"),))
    both = User(
        "c",
        UserType.NORMAL,
        (make_rule("Topic:A", ["sub"], "allow"), make_rule("Group:g", ["sub"], "allow")),
    )
    pull = {"topic": "A", "consumerGroup": "g"}
    assert not on_broker(topic_only, RequestCode.PULL_MESSAGE, pull)
    assert on_broker(both, RequestCode.PULL_MESSAGE, pull)
    assert on_broker(both, RequestCode.ACK_MESSAGE, {"consumerGroup": "g"})
    # The group's retry topic is the group's resource.
    assert on_broker(both, RequestCode.PULL_MESSAGE, {"topic": "%RETRY%g", "consumerGroup": "g"})
    assert not on_broker(both, RequestCode.SEND_MESSAGE, {"topic": "A"})


def test_deny_wins_and_source_ranges_count() -> None:
    user = User(
        "u",
        UserType.NORMAL,
        (
            make_rule("Topic:*", ["pub"], "allow"),
            make_rule("Topic:secret", ["pub"], "deny"),
            make_rule("Topic:lan", ["sub"], "allow", ["10.0.0.0/8"]),
        ),
    )
    assert on_broker(user, RequestCode.SEND_MESSAGE, {"topic": "x"})
    assert not on_broker(user, RequestCode.SEND_MESSAGE, {"topic": "secret"})
    assert on_broker(user, RequestCode.GET_MAX_OFFSET, {"topic": "lan"}, ip="10.1.2.3")
    assert not on_broker(user, RequestCode.GET_MAX_OFFSET, {"topic": "lan"}, ip="192.168.0.1")


def test_admin_and_unknown_requests_need_a_super_user() -> None:
    for code in (RequestCode.NOTIFY_BROKER_ROLE_CHANGED, RequestCode.FENCE_STATIC_QUEUE, 99999):
        assert not on_broker(PUB_A, code, {})
        assert on_broker(ADMIN, code, {})
    group_admin = User("g", UserType.NORMAL, (make_rule("Group:g", ["create"], "allow"),))
    body = msgpack.packb({"groupName": "g"})
    assert on_broker(group_admin, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
    other = msgpack.packb({"groupName": "h"})
    assert not on_broker(group_admin, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, other)


@pytest.mark.parametrize("code", sorted(SUPER_ONLY_CONTROLLER_CODES))
def test_controller_admin_commands_are_super_only(code: int) -> None:
    everything = User(
        "n",
        UserType.NORMAL,
        tuple(
            make_rule(
                r, ["pub", "sub", "create", "update", "delete", "get", "list", "admin"], "allow"
            )
            for r in ("Topic:*", "Group:*", "Cluster:*")
        ),
    )
    req = request(code, 1, {"brokerName": "b", "username": "x"})
    decision = authorize(everything, controller_checks(req, ""), "127.0.0.1", code)
    assert not decision.allowed and "super user" in decision.reason
    assert authorize(ADMIN, controller_checks(req, ""), "127.0.0.1", code).allowed


def test_controller_reads_need_only_authentication() -> None:
    nobody = User("n", UserType.NORMAL)
    for code in (
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
        RequestCode.CONTROLLER_GET_METADATA_INFO,
    ):
        req = request(code, 1, {})
        assert authorize(nobody, controller_checks(req, ""), "127.0.0.1", code).allowed
    sync = request(ControllerCode.AUTH_SYNC_USERS, 1, {})
    assert not authorize(nobody, controller_checks(sync, ""), "127.0.0.1", 5110).allowed
