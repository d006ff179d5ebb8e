"""Users and access rules (ACL): the data model, its validation, and the one decision function.

A user is a username (RocketMQ's access key) of type ``super`` or ``normal`` with a list of rules.
A rule names one resource pattern (``Topic:orders``, ``Topic:orders-*``, ``Group:*``,
``Cluster:DefaultCluster``), a set of actions, a decision (allow or deny) and optionally the
source address ranges (CIDRs) it is limited to. A user's rules are keyed by resource pattern:
one rule per pattern.

:func:`decide` answers whether a user may do an action on a resource from an address: super users
may do everything; otherwise a matching deny wins over any matching allow, whatever the order of
the rules; no matching rule means deny.

The secret never appears here: the controllers keep it sealed (:mod:`protocol.sealing`) beside
the user, and no answer carries it. Pure code: no I/O, no clock.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, TypeVar

MAX_USERNAME_CHARS: Final = 64
MIN_SECRET_CHARS: Final = 8
MAX_SECRET_CHARS: Final = 256
MAX_PATTERN_NAME_CHARS: Final = 255
MAX_RULES: Final = 256
MAX_SOURCES: Final = 32

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AclError(ValueError):
    """An invalid user, rule or request field; the message says which and why."""


class UserType(StrEnum):
    SUPER = "super"
    NORMAL = "normal"


class ResourceType(StrEnum):
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"


class Action(StrEnum):
    PUB = "pub"
    SUB = "sub"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    GET = "get"
    LIST = "list"
    ADMIN = "admin"


class Effect(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


E = TypeVar("E", bound=StrEnum)


def _choice(enum: type[E], what: str, value: object) -> E:
    if not isinstance(value, str):
        raise AclError(f"{what} must be a string, not {type(value).__name__}")
    for member in enum:
        if member.value.lower() == value.strip().lower():
            return member
    known = ", ".join(m.value for m in enum)
    raise AclError(f"unknown {what} {value!r} (one of: {known})")


def check_username(value: object) -> str:
    """1 to MAX_USERNAME_CHARS letters, digits, '-', '_' or '.'."""
    if not isinstance(value, str):
        raise AclError(f"username must be a string, not {type(value).__name__}")
    if not value:
        raise AclError("username must not be empty")
    if len(value) > MAX_USERNAME_CHARS or not all(c.isalnum() or c in "-_." for c in value):
        raise AclError(
            f"username {value!r} may hold letters, digits, '-', '_' and '.' "
            f"(1 to {MAX_USERNAME_CHARS})"
        )
    return value


def check_secret(value: object) -> str:
    """MIN_SECRET_CHARS to MAX_SECRET_CHARS printable ASCII characters (the message never
    repeats the secret)."""
    if not isinstance(value, str):
        raise AclError(f"secret must be a string, not {type(value).__name__}")
    if not MIN_SECRET_CHARS <= len(value) <= MAX_SECRET_CHARS:
        raise AclError(f"secret must be {MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters")
    if not all(" " < c <= "~" for c in value):
        raise AclError("secret may hold printable ASCII characters only (no spaces)")
    return value


def user_type(value: object) -> UserType:
    return _choice(UserType, "user type", value)


def action(value: object) -> Action:
    return _choice(Action, "action", value)


def effect(value: object) -> Effect:
    return _choice(Effect, "decision", value)


# Resources -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """A concrete resource a request touches: ``Resource(ResourceType.TOPIC, "orders")``."""

    type: ResourceType
    name: str


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """``Type:name`` (exact), ``Type:prefix*`` (every name starting with prefix) or ``Type:*``."""

    type: ResourceType
    name: str
    prefix: bool = False

    def matches(self, resource: Resource) -> bool:
        if resource.type is not self.type:
            return False
        if self.prefix:
            return resource.name.startswith(self.name)
        return resource.name == self.name

    def __str__(self) -> str:
        return f"{self.type.value}:{self.name}{'*' if self.prefix else ''}"


def resource_pattern(text: object) -> ResourcePattern:
    """Parse ``Type:name``, ``Type:prefix*`` or ``Type:*`` (type case-insensitive)."""
    if not isinstance(text, str):
        raise AclError(f"resource must be a string, not {type(text).__name__}")
    kind, sep, name = text.strip().partition(":")
    if not sep:
        raise AclError(f"resource {text!r} must be Type:name (Type: Cluster, Topic or Group)")
    rtype = _choice(ResourceType, "resource type", kind)
    prefix = name.endswith("*")
    stem = name[:-1] if prefix else name
    if not stem and not prefix:
        raise AclError(f"resource {text!r} has an empty name (use {rtype.value}:* for every one)")
    if len(stem) > MAX_PATTERN_NAME_CHARS:
        raise AclError(f"resource name of {text!r} is longer than {MAX_PATTERN_NAME_CHARS}")
    if "*" in stem or not all(c.isalnum() or c in "-_%." for c in stem):
        raise AclError(
            f"resource name of {text!r} may hold letters, digits, '-', '_', '%', '.' "
            "and one trailing '*'"
        )
    return ResourcePattern(rtype, stem, prefix)


# Rules -----------------------------------------------------------------------------------------


def source_network(text: object) -> IpNetwork:
    """A CIDR (``10.0.0.0/8``, ``::1/128``) or a single address (``10.1.2.3``)."""
    if not isinstance(text, str):
        raise AclError(f"source address range must be a string, not {type(text).__name__}")
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise AclError(f"malformed CIDR {text!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Rule:
    """Allow or deny ``actions`` on resources matching ``resource``, from ``sources`` (every
    address when empty). Build with :func:`make_rule` to validate text input."""

    resource: ResourcePattern
    actions: frozenset[Action]
    effect: Effect
    sources: tuple[IpNetwork, ...] = ()

    def __post_init__(self) -> None:
        if not self.actions:
            raise AclError(f"rule on {self.resource} names no action")
        if len(self.sources) > MAX_SOURCES:
            raise AclError(f"rule on {self.resource} has more than {MAX_SOURCES} source ranges")

    def matches(
        self, resource: Resource, act: Action, source: ipaddress.IPv4Address | ipaddress.IPv6Address
    ) -> bool:
        if act not in self.actions or not self.resource.matches(resource):
            return False
        return not self.sources or any(source in net for net in self.sources)

    def matches_but_source(self, resource: Resource, act: Action) -> bool:
        """The rule names the resource and the action, and limits the source addresses."""
        return bool(self.sources) and act in self.actions and self.resource.matches(resource)

    def to_doc(self) -> dict[str, Any]:
        """The rule as a request/answer document (and its snapshot form)."""
        return {
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "decision": self.effect.value,
            "sources": [str(net) for net in self.sources],
        }


def make_rule(
    resource: object, actions: Iterable[object], decision: object, sources: Iterable[object] = ()
) -> Rule:
    """A validated rule from text (AclError naming the bad field)."""
    acts = frozenset(action(a) for a in actions)
    if not acts:
        raise AclError(f"rule on {resource!r} names no action")
    nets: list[IpNetwork] = []
    for raw in sources:
        net = source_network(raw)
        if net not in nets:
            nets.append(net)
    nets.sort(key=lambda n: (n.version, n.network_address, n.prefixlen))
    return Rule(resource_pattern(resource), acts, effect(decision), tuple(nets))


def rule_from_doc(doc: object) -> Rule:
    """The inverse of :meth:`Rule.to_doc`; AclError for anything else."""
    if not isinstance(doc, Mapping):
        raise AclError("a rule must be a map with resource, actions, decision and sources")
    actions = doc.get("actions")
    sources = doc.get("sources") or []
    if not isinstance(actions, list) or not isinstance(sources, list):
        raise AclError("a rule's actions and sources must be lists")
    return make_rule(doc.get("resource"), actions, doc.get("decision"), sources)


def merge_rules(rules: Sequence[Rule], changes: Sequence[Rule]) -> tuple[Rule, ...]:
    """``rules`` with each rule of ``changes`` put in place of the one on its resource pattern
    (or added), in a canonical order (by pattern text)."""
    by_pattern = {str(r.resource): r for r in rules}
    for rule in changes:
        by_pattern[str(rule.resource)] = rule
    if len(by_pattern) > MAX_RULES:
        raise AclError(f"a user may have at most {MAX_RULES} rules")
    return tuple(by_pattern[key] for key in sorted(by_pattern))


# Users and the decision ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class User:
    """A user as the decision sees it: never its secret."""

    username: str
    type: UserType
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str


def decide(user: User | None, resource: Resource, act: Action, source_ip: str) -> Decision:
    """May ``user`` do ``act`` on ``resource`` from ``source_ip``?

    Super users may do everything. Otherwise every rule that matches the resource, the action
    and the address counts: any deny refuses (whatever the rule order), else any allow permits,
    else (no matching rule) refused. An unknown user or an unparseable address is refused.
    """
    if user is None:
        return Decision(False, "unknown user")
    if user.type is UserType.SUPER:
        return Decision(True, f"{user.username} is a super user")
    try:
        source = _address(source_ip.strip())
    except ValueError:
        return Decision(False, f"source address {source_ip!r} is not an IP address")
    allow: Rule | None = None
    elsewhere: Rule | None = None  # an allow rule that matches but for the source address
    for rule in user.rules:
        if not rule.matches(resource, act, source):
            if rule.effect is Effect.ALLOW and rule.matches_but_source(resource, act):
                elsewhere = elsewhere or rule
            continue
        if rule.effect is Effect.DENY:
            where = f" from {source}" if rule.sources else ""
            return Decision(
                False, f"{act.value} on {_text(resource)}{where} denied by rule {rule.resource}"
            )
        allow = allow or rule
    if allow is not None:
        return Decision(True, f"{act.value} on {_text(resource)} allowed by rule {allow.resource}")
    refused = f"no rule of {user.username} allows {act.value} on {_text(resource)}"
    if elsewhere is not None:  # the rule is there, the client is not where it allows
        ranges = ", ".join(str(net) for net in elsewhere.sources)
        return Decision(
            False,
            f"{refused} from {source} (rule {elsewhere.resource} allows it from {ranges} only)",
        )
    return Decision(False, refused)


@functools.lru_cache(maxsize=4096)
def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A parsed address, remembered: the same few client addresses come with every request."""
    return ipaddress.ip_address(text)


def _text(resource: Resource) -> str:
    return f"{resource.type.value}:{resource.name}"
