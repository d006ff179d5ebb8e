"""Users and rules in the state machine: decisions, deterministic apply, the compare-and-set on
a user's version, event codec and the snapshot round trip."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata import (
    DeleteUser,
    EventDecodeError,
    PutAcl,
    PutUser,
    ReplicasInfoManager,
    SnapshotError,
    decode_event,
    encode_event,
)
from controller.metadata.events import ApplyBrokerId, UpdateTopic
from protocol.acl import Action, UserType, make_rule, resource_pattern
from protocol.codes import ResponseCode as RC
from protocol.sealing import unseal
from tests.hypothesis_profiles import examples

KEY = b"cluster-key-" * 4


def sealer(username: str, secret: str) -> bytes:
    from protocol.sealing import seal

    return seal(KEY, b"n" * 16, secret.encode(), username.encode())


def commit(managers: list[ReplicasInfoManager], decision: object) -> None:
    """Encode, decode and apply the decision's events on every manager, as Raft would."""
    for event in decision.events:  # type: ignore[attr-defined]
        data = encode_event(event)
        outcomes = {m.apply(decode_event(data)).code for m in managers}
        assert outcomes == {RC.SUCCESS}


def test_users_and_rules_apply_identically_and_survive_a_snapshot() -> None:
    a, b = ReplicasInfoManager(), ReplicasInfoManager()
    commit([a, b], a.apply_broker_id("c", "g", 1, "code"))
    commit([a, b], a.update_topic(None, "g", "orders", 4))
    commit([a, b], a.auth.create_user("alice", "alice-secret", UserType.NORMAL, sealer))
    commit([a, b], a.auth.create_user("root", "root-secret!", UserType.SUPER, sealer))
    rules = [
        make_rule("Topic:orders", ["pub"], "allow", ["10.0.0.0/8"]),
        make_rule("Group:*", ["sub"], "deny"),
    ]
    commit([a, b], a.auth.put_acl("alice", rules, create=True))
    assert a.snapshot() == b.snapshot()

    restored = ReplicasInfoManager.from_snapshot(a.snapshot())
    assert restored.snapshot() == a.snapshot()
    assert restored.group_topics("g") == {"orders": 4}
    views = restored.auth.list_acl()
    assert [v.username for v in views] == ["alice"]
    assert [str(r.resource) for r in views[0].rules] == ["Group:*", "Topic:orders"]
    record = restored.auth.get("alice")
    assert record is not None and record.version == 2
    assert unseal(KEY, record.sealed_secret, b"alice") == b"alice-secret"
    assert b"alice-secret" not in a.snapshot()


def test_snapshot_without_users_keeps_the_older_versions() -> None:
    m = ReplicasInfoManager()
    assert msgpack.unpackb(m.snapshot())[1] == 1  # no topics, no users: what old ones wrote
    commit([m], m.apply_broker_id("c", "g", 1, "code"))
    commit([m], m.update_topic(None, "g", "orders", 4))
    assert msgpack.unpackb(m.snapshot())[1] == 2
    commit([m], m.auth.create_user("alice", "alice-secret", UserType.NORMAL, sealer))
    snapshot = m.snapshot()
    assert msgpack.unpackb(snapshot)[1] == 3
    assert ReplicasInfoManager.from_snapshot(snapshot).auth.get("alice") is not None
    with pytest.raises(SnapshotError):
        ReplicasInfoManager.from_snapshot(snapshot[:-3])


def test_requests_are_validated_and_conflicts_refused() -> None:
    m = ReplicasInfoManager()
    assert m.auth.create_user("", "alice-secret", UserType.NORMAL, sealer).code == (
        RC.CONTROLLER_INVALID_REQUEST
    )
    assert m.auth.create_user("alice", "short", UserType.NORMAL, sealer).code == (
        RC.CONTROLLER_INVALID_REQUEST
    )
    commit([m], m.auth.create_user("alice", "alice-secret", UserType.NORMAL, sealer))
    assert m.auth.create_user("alice", "alice-secret", UserType.NORMAL, sealer).code == (
        RC.USER_ALREADY_EXISTS
    )
    assert m.auth.update_user("bob", None, UserType.SUPER, sealer).code == RC.USER_NOT_EXIST
    assert m.auth.update_user("alice", None, None, sealer).code == RC.CONTROLLER_INVALID_REQUEST
    rule = make_rule("Topic:a", ["pub"], "allow")
    assert m.auth.put_acl("alice", [rule], create=False).code == RC.ACL_NOT_EXIST
    commit([m], m.auth.put_acl("alice", [rule], create=True))
    assert m.auth.put_acl("alice", [rule], create=True).code == RC.ACL_ALREADY_EXISTS
    assert m.auth.delete_acl("alice", [resource_pattern("Topic:b")]).code == RC.ACL_NOT_EXIST
    commit([m], m.auth.update_user("alice", None, UserType.SUPER, sealer))
    record = m.auth.get("alice")
    assert record is not None and record.user_type is UserType.SUPER and record.rules == (rule,)
    commit([m], m.auth.delete_acl("alice"))
    assert m.auth.list_acl() == []
    commit([m], m.auth.delete_user("alice"))
    assert m.auth.list_users() == []


def test_two_changes_decided_on_the_same_version_cannot_both_apply() -> None:
    m = ReplicasInfoManager()
    commit([m], m.auth.create_user("alice", "alice-secret", UserType.NORMAL, sealer))
    first = m.auth.put_acl("alice", [make_rule("Topic:a", ["pub"], "allow")], create=True)
    second = m.auth.put_acl("alice", [make_rule("Topic:b", ["pub"], "allow")], create=True)
    commit([m], first)
    outcome = m.apply(second.events[0])
    assert outcome.code == RC.SYSTEM_BUSY and "retry" in outcome.remark
    record = m.auth.get("alice")
    assert record is not None and [str(r.resource) for r in record.rules] == ["Topic:a"]
    # A create of an existing user and a delete of a missing one change nothing.
    again = PutUser(username="alice", user_type=UserType.SUPER, sealed_secret=b"x", version=0)
    assert m.apply(again).code == RC.USER_ALREADY_EXISTS
    assert m.apply(DeleteUser(username="bob", version=1)).code == RC.USER_NOT_EXIST


def test_user_events_round_trip_and_bad_bytes_are_refused() -> None:
    rules = (
        make_rule("Group:g*", ["sub"], "deny", ["::1"]),
        make_rule("Topic:a", ["pub"], "allow"),
    )
    events = [
        PutUser(
            username="alice", user_type=UserType.NORMAL, sealed_secret=b"\x01sealed", version=0
        ),
        DeleteUser(username="alice", version=3),
        PutAcl(username="alice", rules=rules, version=2),
        ApplyBrokerId(cluster="c", broker_name="g", broker_id=1, register_code="r"),
        UpdateTopic(broker_name="g", topic="t", queues=1),
    ]
    for event in events:
        assert decode_event(encode_event(event)) == event

    for bad in (
        [7, "alice", "root", b"x", 0],
        [7, "", "normal", b"x", 0],
        [8, "alice", 0],
        [9, "alice", [["Topic:a", ["pub"], "allow", []], ["Topic:a", ["sub"], "allow", []]], 1],
        [9, "alice", [["Topic:a", ["sub", "pub"], "allow", []]], 1],
        [9, "alice", [["Topic:a", ["pub"], "allow", ["10.0.0.1/8"]]], 1],
    ):
        with pytest.raises(EventDecodeError):
            decode_event(msgpack.packb(bad, use_bin_type=True))
    with pytest.raises(ValueError, match="ascending"):
        PutAcl(username="alice", rules=tuple(reversed(rules)), version=2)


def test_a_rule_list_too_large_for_one_event_is_refused_before_it_is_proposed() -> None:
    m = ReplicasInfoManager()
    commit([m], m.auth.create_user("alice", "alice-secret", UserType.NORMAL, sealer))
    sources = [f"2001:db8:{i:x}::/48" for i in range(32)]
    rules = [
        make_rule(f"Topic:t{i:03d}-{'x' * 200}", ["pub"], "allow", sources) for i in range(100)
    ]
    decision = m.auth.put_acl("alice", rules, create=True)
    assert decision.code == RC.CONTROLLER_INVALID_REQUEST and not decision.events
    assert "more than 65536" in decision.remark
    fits = m.auth.put_acl("alice", rules[:10], create=True)
    commit([m], fits)


usernames = st.sampled_from(["alice", "bob", "carol"])
patterns = st.sampled_from(["Topic:a", "Topic:a*", "Topic:*", "Group:g", "Cluster:c"])
rule_specs = st.tuples(
    patterns,
    st.lists(st.sampled_from(list(Action)), min_size=1, max_size=3),
    st.sampled_from(["allow", "deny"]),
    st.lists(st.sampled_from(["10.0.0.0/8", "::1", "192.168.1.0/24"]), max_size=2),
)
operations = st.one_of(
    st.tuples(st.just("create"), usernames, st.sampled_from(list(UserType))),
    st.tuples(st.just("update"), usernames, st.sampled_from(list(UserType))),
    st.tuples(st.just("delete"), usernames),
    st.tuples(
        st.just("acl"), usernames, st.lists(rule_specs, min_size=1, max_size=3), st.booleans()
    ),
    st.tuples(st.just("deleteAcl"), usernames, st.lists(patterns, max_size=2)),
)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(operations, max_size=12))
def test_any_history_applies_alike_and_its_snapshot_restores_it(ops: list[tuple[Any, ...]]) -> None:
    a, b = ReplicasInfoManager(), ReplicasInfoManager()
    for name in ("alice", "bob"):  # most operations then apply
        commit([a, b], a.auth.create_user(name, "a-secret-" + name, UserType.NORMAL, sealer))
    for op in ops:
        auth = a.auth
        if op[0] == "create":
            decision: Any = auth.create_user(op[1], "a-secret-" + op[1], op[2], sealer)
        elif op[0] == "update":
            decision = auth.update_user(op[1], None, op[2], sealer)
        elif op[0] == "delete":
            decision = auth.delete_user(op[1])
        elif op[0] == "acl":
            specs = {spec[0]: spec for spec in op[2]}.values()  # one rule per pattern
            rules = [make_rule(*spec) for spec in specs]
            decision = auth.put_acl(op[1], rules, create=op[3])
        else:
            decision = auth.delete_acl(op[1], [resource_pattern(p) for p in set(op[2])])
        if decision.ok:
            commit([a, b], decision)
        else:
            assert not decision.events
    assert a.snapshot() == b.snapshot()
    restored = ReplicasInfoManager.from_snapshot(a.snapshot())
    assert restored.snapshot() == a.snapshot()
    assert restored.auth.records() == a.auth.records()
