"""Users and access rules on the controllers (docs/protocol.md, "Controller requests"; rules as in
protocol/acl.py).

Requests (``?`` marks a field that may be left out)::

    AUTH_CREATE_USER 3001   header username, userType? (super, normal; absent: normal);
                            body {"secret": text}
    AUTH_UPDATE_USER 3002   header username, userType?; body {"secret": text}? (one of the two)
    AUTH_DELETE_USER 3003   header username
    AUTH_LIST_USER 3005     header filter? (a username prefix)
    AUTH_CREATE_ACL 3006,
    AUTH_UPDATE_ACL 3007    header username; body {"rules": [rule, ...]} (1 to 256)
    AUTH_DELETE_ACL 3008    header username; body {"resources": ["Topic:a", ...]}? (none: all)
    AUTH_LIST_ACL 3010      header username?, resource? (only rules whose pattern contains it)
    AUTH_SYNC_USERS 5110    header digest? (the table the broker holds)

The user requests' SUCCESS (creating, changing or deleting a user or its rules) names the user in
the header (:class:`UserAnswer`): ``username``, ``userType``, ``version``; the ACL requests add
the user's rules now, body ``{"rules": [rule, ...]}``.

AUTH_SYNC_USERS's SUCCESS (:class:`SyncUsersAnswer`): header ``digest`` and ``unchanged`` (true:
the broker holds this table already, no body); otherwise body ``{"users": [{"username",
"userType", "sealedSecret" (bin, sealed under the cluster's auth key), "version", "rules"}]}``.

A missing or mistyped header field raises :class:`~protocol.fields.FieldError`; a user type, a
secret, a rule or a resource pattern the ACL rules refuse, or a body that does not decode,
raises :class:`~protocol.controller_requests.base.InvalidRequest` (CONTROLLER_INVALID_REQUEST)
with the rule's message. Whether a secret is good enough is the controller's to judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import msgpack

from protocol.acl import (
    AclError,
    ResourcePattern,
    Rule,
    User,
    UserType,
    resource_pattern,
    rule_from_doc,
    user_type,
)
from protocol.codes import ControllerCode
from protocol.controller_requests.base import InvalidRequest, pack_map, unpack_map
from protocol.fields import FieldError, opt_bool, opt_str, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = [
    "MAX_RULES_PER_REQUEST",
    "CreateAcl",
    "CreateUser",
    "DeleteAcl",
    "DeleteUser",
    "ListAcl",
    "ListUsers",
    "SealedUser",
    "SyncUsers",
    "SyncUsersAnswer",
    "UpdateAcl",
    "UpdateUser",
    "UserAnswer",
]

MAX_RULES_PER_REQUEST: Final = 256


def _type(header: Mapping[str, Scalar]) -> UserType | None:
    value = opt_str(header, "userType")
    if not value:
        return None
    try:
        return user_type(value)
    except AclError as exc:
        raise InvalidRequest(str(exc)) from None


def _secret(body: bytes | None, *, required: bool) -> str | None:
    secret = unpack_map(body).get("secret")
    if secret is None and not required:
        return None
    if not isinstance(secret, str):
        raise InvalidRequest("body must carry the secret as a string")
    return secret


def _user_header(username: str, kind: UserType | None) -> Header:
    header: Header = {"username": username}
    if kind is not None:
        header["userType"] = kind.value
    return header


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateUser:
    """AUTH_CREATE_USER: a user with ``secret`` (sealed by the controllers)."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_CREATE_USER

    username: str
    secret: str
    user_type: UserType | None = None
    """None: not sent (the controllers make a normal user)."""

    def encode(self) -> tuple[Header, bytes | None]:
        return _user_header(self.username, self.user_type), pack_map({"secret": self.secret})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> CreateUser:
        username = req_str(header, "username")
        kind = _type(header)
        secret = _secret(body, required=True)
        assert secret is not None
        return cls(username=username, user_type=kind, secret=secret)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateUser:
    """AUTH_UPDATE_USER: a new secret and/or type (None: unchanged)."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_UPDATE_USER

    username: str
    user_type: UserType | None = None
    secret: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        body = None if self.secret is None else pack_map({"secret": self.secret})
        return _user_header(self.username, self.user_type), body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UpdateUser:
        username = req_str(header, "username")
        kind = _type(header)
        return cls(username=username, user_type=kind, secret=_secret(body, required=False))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteUser:
    """AUTH_DELETE_USER: the user and its rules."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_DELETE_USER

    username: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"username": self.username}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteUser:
        return cls(username=req_str(header, "username"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ListUsers:
    """AUTH_LIST_USER: the users whose name starts with ``prefix`` ("": every one)."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_LIST_USER

    prefix: str = ""

    def encode(self) -> tuple[Header, bytes | None]:
        return {"filter": self.prefix}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ListUsers:
        return cls(prefix=opt_str(header, "filter"))


def _rules(body: bytes | None) -> tuple[Rule, ...]:
    raw = unpack_map(body).get("rules")
    if not isinstance(raw, list) or not raw:
        raise InvalidRequest("body must carry a non-empty list of rules")
    if len(raw) > MAX_RULES_PER_REQUEST:
        raise InvalidRequest(f"at most {MAX_RULES_PER_REQUEST} rules per request")
    try:
        return tuple(rule_from_doc(doc) for doc in raw)
    except AclError as exc:
        raise InvalidRequest(str(exc)) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class _PutAcl:
    username: str
    rules: tuple[Rule, ...]

    def encode(self) -> tuple[Header, bytes | None]:
        rules: list[Any] = [rule.to_doc() for rule in self.rules]
        return {"username": self.username}, pack_map({"rules": rules})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAcl(_PutAcl):
    """AUTH_CREATE_ACL: rules on resource patterns the user has none on yet."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_CREATE_ACL

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> CreateAcl:
        username = req_str(header, "username")
        return cls(username=username, rules=_rules(body))


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateAcl(_PutAcl):
    """AUTH_UPDATE_ACL: rules in place of the user's rules on the same patterns."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_UPDATE_ACL

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UpdateAcl:
        username = req_str(header, "username")
        return cls(username=username, rules=_rules(body))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAcl:
    """AUTH_DELETE_ACL: the user's rules on ``resources`` (empty: all its rules)."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_DELETE_ACL

    username: str
    resources: tuple[ResourcePattern, ...] = ()

    def encode(self) -> tuple[Header, bytes | None]:
        patterns: list[Any] = [str(p) for p in self.resources]
        return {"username": self.username}, pack_map({"resources": patterns})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteAcl:
        username = req_str(header, "username")
        raw = unpack_map(body).get("resources") or []
        if not isinstance(raw, list):
            raise InvalidRequest("resources must be a list")
        try:
            patterns = tuple(resource_pattern(r) for r in raw)
        except AclError as exc:
            raise InvalidRequest(str(exc)) from None
        return cls(username=username, resources=patterns)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListAcl:
    """AUTH_LIST_ACL: the rules of ``username`` (None: every user) whose pattern text contains
    ``resource``."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_LIST_ACL

    username: str | None = None
    resource: str = ""

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"resource": self.resource}
        if self.username:
            header["username"] = self.username
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ListAcl:
        return cls(
            username=opt_str(header, "username") or None, resource=opt_str(header, "resource")
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncUsers:
    """AUTH_SYNC_USERS: the whole table, unless it still is the one of ``digest``."""

    code: ClassVar[ControllerCode] = ControllerCode.AUTH_SYNC_USERS

    digest: str = ""

    def encode(self) -> tuple[Header, bytes | None]:
        return {"digest": self.digest}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SyncUsers:
        return cls(digest=opt_str(header, "digest"))


@dataclass(frozen=True, slots=True)
class SealedUser:
    """A user of AUTH_SYNC_USERS's table: what a decision needs, and its secret sealed under
    the cluster's auth key (:mod:`protocol.sealing`; only a holder of the key unseals it)."""

    user: User
    sealed_secret: bytes
    version: int = 0

    def to_doc(self) -> dict[str, Any]:
        return {
            "username": self.user.username,
            "userType": self.user.type.value,
            "sealedSecret": self.sealed_secret,
            "version": self.version,
            "rules": [rule.to_doc() for rule in self.user.rules],
        }


def sealed_users(body: bytes | None) -> tuple[SealedUser, ...]:
    """The users of AUTH_SYNC_USERS's body; :class:`~protocol.fields.FieldError` naming what is
    wrong (a rule or user type the ACL rules refuse: with the user's name)."""
    try:
        doc = msgpack.unpackb(body or b"", raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise FieldError(f"undecodable users body: {type(exc).__name__}") from None
    raw = doc.get("users") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        raise FieldError("users body lacks a list of users")
    users: list[SealedUser] = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise FieldError("a user must be a map")
        name, sealed, rules = item.get("username"), item.get("sealedSecret"), item.get("rules")
        version = item.get("version", 0)
        if (
            not isinstance(name, str)
            or not isinstance(sealed, bytes)
            or not isinstance(rules, list)
            or type(version) is not int
        ):
            raise FieldError("a user needs username, sealedSecret and rules")
        try:
            user = User(name, user_type(item.get("userType")), tuple(map(rule_from_doc, rules)))
        except AclError as exc:
            raise FieldError(f"user {name}: {exc}") from None
        users.append(SealedUser(user, sealed, version))
    return tuple(users)


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncUsersAnswer:
    """The user requests' SUCCESS (creating, changing or deleting a user or its rules) names the user in
    the header (:class:`UserAnswer`): ``username``, ``userType``, ``version``; the ACL requests add
    the user's rules now, body ``{"rules": [rule, ...]}``.

    AUTH_SYNC_USERS's SUCCESS: the table's ``digest`` and its users, None when the broker
        holds that table already (``unchanged``)."""

    digest: str
    users: tuple[SealedUser, ...] | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        if self.users is None:
            return {"digest": self.digest, "unchanged": True}, None
        body = pack_map({"users": [u.to_doc() for u in self.users]})
        return {"digest": self.digest, "unchanged": False}, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> SyncUsersAnswer:
        digest = header.get("digest")
        if not isinstance(digest, str):
            raise FieldError("answer lacks the digest")
        if header.get("unchanged") is not None and opt_bool(header, "unchanged"):
            return cls(digest=digest)
        return cls(digest=digest, users=sealed_users(body))


@dataclass(frozen=True, slots=True, kw_only=True)
class UserAnswer:
    """The header of a user request's SUCCESS: the user as it now is (or was, deleted)."""

    username: str
    user_type: UserType
    version: int

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "username": self.username,
            "userType": self.user_type.value,
            "version": self.version,
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UserAnswer:
        try:
            kind = user_type(header.get("userType"))
        except AclError as exc:
            raise FieldError(str(exc)) from None
        return cls(
            username=req_str(header, "username"), user_type=kind, version=req_int(header, "version")
        )

    def to_doc(self) -> dict[str, Any]:
        """What rmqctl prints of it."""
        return dict(self.encode()[0])
