"""The broker's side of authentication, pure parts: the users' table as AUTH_SYNC_USERS sends it
(secrets sealed under the cluster's key) and the cache of recent permission decisions."""

from __future__ import annotations

import os

import msgpack
import pytest

from broker.auth.guard import DecisionCache
from broker.auth.users import UsersError, decode_users
from protocol.acl import User, UserType, make_rule
from protocol.codes import RequestCode
from protocol.remoting import request
from protocol.sealing import NONCE_BYTES, seal

KEY = b"k" * 32


def users_body(key: bytes = KEY) -> bytes:
    sealed = seal(key, os.urandom(NONCE_BYTES), b"alice-Secret-1", b"alice")
    doc = {
        "users": [
            {
                "username": "alice",
                "userType": "normal",
                "sealedSecret": sealed,
                "version": 3,
                "rules": [make_rule("Topic:A", ["pub"], "allow").to_doc()],
            }
        ]
    }
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return packed


def test_users_are_unsealed_with_the_cluster_key() -> None:
    users = decode_users(users_body(), KEY)
    user, secret = users["alice"]
    assert secret == "alice-Secret-1"
    assert user.type is UserType.NORMAL and str(user.rules[0].resource) == "Topic:A"


def test_a_secret_sealed_under_another_key_cannot_sign_in() -> None:
    users = decode_users(users_body(b"j" * 32), KEY)
    assert users["alice"][1] is None


@pytest.mark.parametrize(
    "body", [b"\xc1", msgpack.packb({"users": 3}), msgpack.packb({"users": [{"username": 1}]})]
)
def test_a_malformed_answer_is_an_error_not_a_crash(body: bytes) -> None:
    with pytest.raises(UsersError):
        decode_users(body, KEY)


def test_cached_decisions_follow_a_changed_user() -> None:
    cache = DecisionCache()
    send_a = request(RequestCode.SEND_MESSAGE, 1, {"topic": "A"})
    send_b = request(RequestCode.SEND_MESSAGE, 2, {"topic": "B"})
    allowed = User("app", UserType.NORMAL, (make_rule("Topic:A", ["pub"], "allow"),))
    assert cache.decide(allowed, send_a, "10.0.0.1", "c").allowed
    assert cache.decide(allowed, send_a, "10.0.0.1", "c").allowed  # from the cache
    assert not cache.decide(allowed, send_b, "10.0.0.1", "c").allowed
    # The users were refreshed: a new User object with a deny on A.
    denied = User("app", UserType.NORMAL, (make_rule("Topic:A", ["pub"], "deny"),))
    assert not cache.decide(denied, send_a, "10.0.0.1", "c").allowed
    # Source ranges: the host is part of the key.
    lan = User("lan", UserType.NORMAL, (make_rule("Topic:A", ["pub"], "allow", ["10.0.0.0/8"]),))
    assert cache.decide(lan, send_a, "10.9.9.9", "c").allowed
    assert not cache.decide(lan, send_a, "192.168.1.1", "c").allowed


@pytest.mark.parametrize(
    ("code", "field"),
    [
        (RequestCode.PULL_MESSAGE, "topic"),
        (RequestCode.PULL_MESSAGE, "consumerGroup"),
        (RequestCode.CONSUMER_SEND_MSG_BACK, "group"),
    ],
)
def test_every_field_the_rules_read_keys_the_cached_decision(code: int, field: str) -> None:
    """A request differing from a cached one only in a field a permission rule reads gets its
    own decision, never the cached one."""
    user = User(
        "app",
        UserType.NORMAL,
        (make_rule("Topic:A", ["sub"], "allow"), make_rule("Group:g", ["sub"], "allow")),
    )
    header = {"topic": "A", "consumerGroup": "g", "group": "g"}
    cache = DecisionCache()
    assert cache.decide(user, request(code, 1, dict(header)), "10.0.0.1", "c").allowed
    other = request(code, 2, {**header, field: "other"})
    assert not cache.decide(user, other, "10.0.0.1", "c").allowed
