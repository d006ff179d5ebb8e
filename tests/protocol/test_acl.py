"""The ACL core: validation, pattern and CIDR matching, and decide() (deny wins, super users,
no rule = deny)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.acl import (
    AclError,
    Action,
    Resource,
    ResourceType,
    User,
    UserType,
    check_secret,
    check_username,
    decide,
    make_rule,
    merge_rules,
    resource_pattern,
    rule_from_doc,
)

TOPIC = ResourceType.TOPIC


def topic(name: str) -> Resource:
    return Resource(TOPIC, name)


def test_patterns_parse_and_match() -> None:
    exact = resource_pattern("Topic:orders")
    prefix = resource_pattern("topic:ord*")
    every = resource_pattern("TOPIC:*")
    assert str(exact) == "Topic:orders" and str(prefix) == "Topic:ord*" and str(every) == "Topic:*"
    assert exact.matches(topic("orders")) and not exact.matches(topic("orders2"))
    assert prefix.matches(topic("orders")) and prefix.matches(topic("ord"))
    assert not prefix.matches(topic("or")) and not prefix.matches(
        Resource(ResourceType.GROUP, "ord")
    )
    assert every.matches(topic("x")) and not every.matches(Resource(ResourceType.CLUSTER, "x"))


@pytest.mark.parametrize(
    ("resource", "message"),
    [
        ("orders", "must be Type:name"),
        ("Queue:orders", "unknown resource type 'Queue'"),
        ("Topic:", "empty name"),
        ("Topic:a*b", "one trailing '*'"),
        ("Topic:a b", "may hold letters"),
    ],
)
def test_bad_resources_are_refused_clearly(resource: str, message: str) -> None:
    with pytest.raises(AclError, match=message):
        resource_pattern(resource)


def test_bad_rule_fields_are_refused_clearly() -> None:
    with pytest.raises(AclError, match="unknown action 'publish'"):
        make_rule("Topic:a", ["publish"], "allow")
    with pytest.raises(AclError, match="names no action"):
        make_rule("Topic:a", [], "allow")
    with pytest.raises(AclError, match="unknown decision 'maybe'"):
        make_rule("Topic:a", ["pub"], "maybe")
    with pytest.raises(AclError, match=re.escape("malformed CIDR '10.0.0.1/8'")):
        make_rule("Topic:a", ["pub"], "allow", ["10.0.0.1/8"])
    with pytest.raises(AclError, match=re.escape("malformed CIDR '300.0.0.0/8'")):
        make_rule("Topic:a", ["pub"], "allow", ["300.0.0.0/8"])
    with pytest.raises(AclError, match="username must not be empty"):
        check_username("")
    with pytest.raises(AclError, match="secret must be 8 to 256"):
        check_secret("short")
    with pytest.raises(AclError) as caught:
        check_secret("has a space in it")
    assert "has a space" not in str(caught.value)  # the message never repeats the secret


def test_rule_documents_round_trip_in_canonical_form() -> None:
    rule = make_rule(
        "topic:ord*", ["SUB", "pub", "pub"], "Deny", ["10.0.0.0/8", "::1", "10.0.0.0/8"]
    )
    doc = rule.to_doc()
    assert doc == {
        "resource": "Topic:ord*",
        "actions": ["pub", "sub"],
        "decision": "deny",
        "sources": ["10.0.0.0/8", "::1/128"],
    }
    assert rule_from_doc(doc) == rule


def test_super_user_may_do_everything() -> None:
    root = User("root", UserType.SUPER)
    for act in Action:
        assert decide(root, Resource(ResourceType.CLUSTER, "c"), act, "1.2.3.4").allowed


def test_no_matching_rule_is_deny() -> None:
    alice = User("alice", UserType.NORMAL, (make_rule("Topic:a", ["pub"], "allow"),))
    assert decide(alice, topic("a"), Action.PUB, "127.0.0.1").allowed
    verdict = decide(alice, topic("b"), Action.PUB, "127.0.0.1")
    assert not verdict.allowed and "no rule of alice allows pub on Topic:b" in verdict.reason
    assert not decide(alice, topic("a"), Action.SUB, "127.0.0.1").allowed
    assert not decide(None, topic("a"), Action.PUB, "127.0.0.1").allowed
    assert not decide(alice, topic("a"), Action.PUB, "not-an-ip").allowed


def test_source_ranges_limit_a_rule() -> None:
    rule = make_rule("Topic:a", ["pub"], "allow", ["10.0.0.0/8", "2001:db8::/32"])
    alice = User("alice", UserType.NORMAL, (rule,))
    assert decide(alice, topic("a"), Action.PUB, "10.9.8.7").allowed
    assert decide(alice, topic("a"), Action.PUB, "2001:db8::5").allowed
    assert not decide(alice, topic("a"), Action.PUB, "11.0.0.1").allowed
    assert not decide(alice, topic("a"), Action.PUB, "::1").allowed


def test_a_refusal_by_a_rules_source_range_names_the_address_seen() -> None:
    rule = make_rule("Topic:a*", ["pub"], "allow", ["10.0.0.0/8", "2001:db8::/32"])
    deny = make_rule("Topic:b", ["pub"], "deny", ["192.168.0.0/16"])
    alice = User("alice", UserType.NORMAL, (rule, deny, make_rule("Topic:b", ["pub"], "allow")))
    assert decide(alice, topic("a1"), Action.PUB, "11.0.0.1").reason == (
        "no rule of alice allows pub on Topic:a1 from 11.0.0.1 (rule Topic:a* allows it from "
        "10.0.0.0/8, 2001:db8::/32 only)"
    )
    assert decide(alice, topic("a1"), Action.PUB, "::1").reason.endswith(
        "from ::1 (rule Topic:a* allows it from 10.0.0.0/8, 2001:db8::/32 only)"
    )
    assert decide(alice, topic("b"), Action.PUB, "192.168.1.2").reason == (
        "pub on Topic:b from 192.168.1.2 denied by rule Topic:b"
    )
    assert decide(alice, topic("b"), Action.PUB, "10.1.1.1").allowed
    # Not a matter of source: no address named.
    assert decide(alice, topic("a1"), Action.SUB, "11.0.0.1").reason == (
        "no rule of alice allows sub on Topic:a1"
    )


def test_merge_replaces_the_rule_on_the_same_pattern() -> None:
    first = make_rule("Topic:b", ["pub"], "allow")
    second = make_rule("Topic:a", ["sub"], "allow")
    merged = merge_rules([first], [second, make_rule("Topic:b", ["sub"], "deny")])
    assert [str(r.resource) for r in merged] == ["Topic:a", "Topic:b"]
    assert merged[1].effect.value == "deny"


names = st.text(alphabet="abc", min_size=1, max_size=4)
actions = st.sampled_from(list(Action))
octet = st.integers(0, 255)


@st.composite
def rules(draw: st.DrawFn) -> tuple[str, list[str], str, list[str]]:
    name = draw(names)
    kind = draw(st.sampled_from(["exact", "prefix", "any"]))
    resource = {"exact": f"Topic:{name}", "prefix": f"Topic:{name}*", "any": "Topic:*"}[kind]
    acts = draw(st.lists(actions, min_size=1, max_size=3))
    sources = draw(
        st.lists(st.builds(lambda a, n: f"{a}.0.0.0/{n}", octet, st.sampled_from([8])), max_size=2)
    )
    effect = draw(st.sampled_from(["allow", "deny"]))
    return resource, [a.value for a in acts], effect, sources


@given(
    specs=st.lists(rules(), max_size=6, unique_by=lambda r: r[0]),
    name=names,
    act=actions,
    ip=st.tuples(octet, octet, octet, octet),
    order=st.randoms(use_true_random=False),
)
def test_decide_is_deny_wins_whatever_the_rule_order(
    specs: list[tuple[str, list[str], str, list[str]]],
    name: str,
    act: Action,
    ip: tuple[int, int, int, int],
    order: object,
) -> None:
    built = [make_rule(r, a, e, s) for r, a, e, s in specs]
    source = ".".join(map(str, ip))
    resource = topic(name)

    # The model: independent of decide(), from the rule texts.
    def applies(r: str, a: list[str], s: list[str]) -> bool:
        stem = r.removeprefix("Topic:")
        hit = name.startswith(stem[:-1]) if stem.endswith("*") else name == stem
        in_range = not s or any(ip[0] == int(cidr.split(".")[0]) for cidr in s)
        return hit and act.value in a and in_range

    matching = [e for r, a, e, s in specs if applies(r, a, s)]
    expected = "allow" in matching and "deny" not in matching
    shuffled = list(built)
    order.shuffle(shuffled)  # type: ignore[attr-defined]
    for ordering in (built, shuffled, list(reversed(built))):
        user = User("u", UserType.NORMAL, tuple(ordering))
        assert decide(user, resource, act, source).allowed is expected
