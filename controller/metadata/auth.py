"""Users and their rules in the controllers' state machine (issue 14, item 1).

Same two halves as :mod:`controller.metadata.state`: request methods run on the active controller
against applied state and return a :class:`~controller.metadata.results.Decision` (an error now,
or the event to commit and the answer to give once it applied); :meth:`AuthTable.apply` runs on
every controller for every committed user event and uses nothing but the event and the state.

Every user has a version, 1 when created and one more with each change to it or its rules; each
event carries the version it was decided at, so two changes decided against the same state can
never both apply (the second is rejected, SYSTEM_BUSY "retry").

The table holds secrets sealed only (:mod:`protocol.sealing`, sealed by the caller before it asks
for a decision): nothing here sees a secret, and :class:`UserView`, the shape every answer is
built from, has no field for one. Pure code: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgpack

from controller.metadata.events import (
    MAX_EVENT_BYTES,
    AuthEvent,
    DeleteUser,
    PutAcl,
    PutUser,
    encode_event,
)
from controller.metadata.results import APPLIED, Applied, Decision, rejected
from protocol.acl import (
    AclError,
    ResourcePattern,
    Rule,
    User,
    UserType,
    check_secret,
    check_username,
    merge_rules,
)
from protocol.codes import ResponseCode as RC

Sealer = Callable[[str, str], bytes]
"""``(username, secret) -> sealed secret``: the caller's sealing under the cluster's auth key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRecord:
    username: str
    user_type: UserType
    sealed_secret: bytes
    version: int
    rules: tuple[Rule, ...] = ()

    def user(self) -> User:
        return User(self.username, self.user_type, self.rules)


@dataclass(frozen=True, slots=True, kw_only=True)
class UserView:
    """A user as answers show it: never its secret."""

    username: str
    user_type: UserType
    version: int
    rules: tuple[Rule, ...]


def _view(record: UserRecord) -> UserView:
    return UserView(
        username=record.username,
        user_type=record.user_type,
        version=record.version,
        rules=record.rules,
    )


def _missing(username: str) -> Applied:
    return Applied(code=RC.USER_NOT_EXIST, remark=f"user {username} does not exist")


def _changed(username: str) -> Applied:
    return Applied(
        code=RC.SYSTEM_BUSY, remark=f"user {username} changed concurrently; retry the request"
    )


class AuthTable:
    __slots__ = ("_digest", "_users")

    def __init__(self, users: dict[str, UserRecord] | None = None) -> None:
        self._users: dict[str, UserRecord] = dict(users or {})
        self._digest: str | None = None

    def digest(self) -> str:
        """A short fingerprint of every user, sealed secret and rule: equal on two controllers
        that applied the same events, different after any change (brokers compare it to know
        when to fetch the users again)."""
        if self._digest is None:
            doc = [
                [
                    r.username,
                    r.user_type.value,
                    r.sealed_secret,
                    r.version,
                    [rule.to_doc() for rule in r.rules],
                ]
                for r in self.records()
            ]
            packed = msgpack.packb(doc, use_bin_type=True)
            self._digest = hashlib.sha256(packed).hexdigest()[:16]
        return self._digest

    # Reads -------------------------------------------------------------------------------------

    def records(self) -> list[UserRecord]:
        """Every user (with its sealed secret: for snapshots and the future broker cache)."""
        return [self._users[name] for name in sorted(self._users)]

    def get(self, username: str) -> UserRecord | None:
        return self._users.get(username)

    def list_users(self, prefix: str = "") -> list[UserView]:
        """LIST_USER: users whose name starts with ``prefix``, ascending, without secrets."""
        return [_view(r) for r in self.records() if r.username.startswith(prefix)]

    def list_acl(self, username: str | None = None, resource: str = "") -> list[UserView]:
        """LIST_ACL: every user's rules (or one user's), keeping only the rules whose resource
        pattern text contains ``resource``; users left with no rule are left out."""
        views: list[UserView] = []
        for record in self.records():
            if username is not None and record.username != username:
                continue
            rules = tuple(r for r in record.rules if resource in str(r.resource))
            if rules:
                views.append(_view(record) if rules == record.rules else _with(record, rules))
        return views

    # Requests ----------------------------------------------------------------------------------

    def _known(self, username: str) -> UserRecord | Decision[UserView]:
        """The user's record, or the refusal a request naming ``username`` gets: a malformed name
        (CONTROLLER_INVALID_REQUEST) or no such user (USER_NOT_EXIST)."""
        try:
            check_username(username)
        except AclError as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        record = self._users.get(username)
        if record is None:
            return rejected(RC.USER_NOT_EXIST, f"user {username} does not exist")
        return record

    def create_user(
        self, username: str, secret: str, kind: UserType, seal: Sealer
    ) -> Decision[UserView]:
        try:
            check_username(username)
            check_secret(secret)
        except AclError as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        if username in self._users:
            return rejected(RC.USER_ALREADY_EXISTS, f"user {username} already exists")
        event = PutUser(
            username=username, user_type=kind, sealed_secret=seal(username, secret), version=0
        )
        view = UserView(username=username, user_type=kind, version=1, rules=())
        return Decision(events=(event,), response=view)

    def update_user(
        self, username: str, secret: str | None, kind: UserType | None, seal: Sealer
    ) -> Decision[UserView]:
        """Change the secret and/or the type; at least one must be given."""
        try:
            check_username(username)
            if secret is not None:
                check_secret(secret)
        except AclError as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        if secret is None and kind is None:
            return rejected(
                RC.CONTROLLER_INVALID_REQUEST, "nothing to update: give a secret or type"
            )
        record = self._users.get(username)
        if record is None:
            return rejected(RC.USER_NOT_EXIST, f"user {username} does not exist")
        event = PutUser(
            username=username,
            user_type=kind or record.user_type,
            sealed_secret=record.sealed_secret if secret is None else seal(username, secret),
            version=record.version,
        )
        view = UserView(
            username=username,
            user_type=event.user_type,
            version=record.version + 1,
            rules=record.rules,
        )
        return Decision(events=(event,), response=view)

    def delete_user(self, username: str) -> Decision[UserView]:
        """Forget the user and its rules."""
        record = self._known(username)
        if isinstance(record, Decision):
            return record
        event = DeleteUser(username=username, version=record.version)
        return Decision(events=(event,), response=_view(record))

    def put_acl(self, username: str, rules: Sequence[Rule], *, create: bool) -> Decision[UserView]:
        """CREATE_ACL (``create``: no rule on these resource patterns may exist yet) or
        UPDATE_ACL (each must exist): the user's rules with ``rules`` put in place."""
        try:
            check_username(username)
        except AclError as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        if not rules:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, "no rule given")
        patterns = [str(r.resource) for r in rules]
        if len(set(patterns)) != len(patterns):
            return rejected(RC.CONTROLLER_INVALID_REQUEST, "a resource is named twice")
        record = self._users.get(username)
        if record is None:
            return rejected(RC.USER_NOT_EXIST, f"user {username} does not exist")
        have = {str(r.resource) for r in record.rules}
        if create:
            taken = sorted(p for p in patterns if p in have)
            if taken:
                return rejected(
                    RC.ACL_ALREADY_EXISTS,
                    f"user {username} already has a rule on {', '.join(taken)} (use updateAcl)",
                )
        else:
            absent = sorted(p for p in patterns if p not in have)
            if absent:
                return rejected(
                    RC.ACL_NOT_EXIST,
                    f"user {username} has no rule on {', '.join(absent)} (use createAcl)",
                )
        try:
            merged = merge_rules(record.rules, rules)
        except AclError as exc:
            return rejected(RC.CONTROLLER_INVALID_REQUEST, str(exc))
        event = PutAcl(username=username, rules=merged, version=record.version)
        size = len(encode_event(event))
        if size > MAX_EVENT_BYTES:
            # Every controller would refuse to decode it from the log: never proposed.
            return rejected(
                RC.CONTROLLER_INVALID_REQUEST,
                f"the rules of {username} would take {size} bytes, more than {MAX_EVENT_BYTES}: "
                "use prefixes or fewer source ranges",
            )
        return Decision(events=(event,), response=_with(record, merged, record.version + 1))

    def delete_acl(
        self, username: str, resources: Sequence[ResourcePattern] = ()
    ) -> Decision[UserView]:
        """DELETE_ACL: the user's rules on ``resources``, or all its rules when none is named."""
        record = self._known(username)
        if isinstance(record, Decision):
            return record
        have = {str(r.resource) for r in record.rules}
        drop = {str(p) for p in resources} or have
        absent = sorted(drop - have)
        if absent:
            return rejected(RC.ACL_NOT_EXIST, f"user {username} has no rule on {', '.join(absent)}")
        if not drop:
            return rejected(RC.ACL_NOT_EXIST, f"user {username} has no rule")
        kept = tuple(r for r in record.rules if str(r.resource) not in drop)
        event = PutAcl(username=username, rules=kept, version=record.version)
        return Decision(events=(event,), response=_with(record, kept, record.version + 1))

    # Apply -------------------------------------------------------------------------------------

    def apply(self, event: AuthEvent) -> Applied:
        """Apply one committed user event; deterministic, and a rejected one changes nothing."""
        self._digest = None
        record = self._users.get(event.username)
        match event:
            case PutUser():
                if event.version == 0:
                    if record is not None:
                        return Applied(
                            code=RC.USER_ALREADY_EXISTS,
                            remark=f"user {event.username} already exists",
                        )
                    rules: tuple[Rule, ...] = ()
                else:
                    if record is None:
                        return _missing(event.username)
                    if record.version != event.version:
                        return _changed(event.username)
                    rules = record.rules
                self._users[event.username] = UserRecord(
                    username=event.username,
                    user_type=event.user_type,
                    sealed_secret=event.sealed_secret,
                    version=event.version + 1,
                    rules=rules,
                )
            case DeleteUser():
                if record is None:
                    return _missing(event.username)
                if record.version != event.version:
                    return _changed(event.username)
                del self._users[event.username]
            case PutAcl():
                if record is None:
                    return _missing(event.username)
                if record.version != event.version:
                    return _changed(event.username)
                self._users[event.username] = _record_with(record, event.rules)
            case _:
                raise TypeError(f"not a user event: {type(event).__name__}")
        return APPLIED


def _record_with(record: UserRecord, rules: tuple[Rule, ...]) -> UserRecord:
    return UserRecord(
        username=record.username,
        user_type=record.user_type,
        sealed_secret=record.sealed_secret,
        version=record.version + 1,
        rules=rules,
    )


def _with(record: UserRecord, rules: tuple[Rule, ...], version: int | None = None) -> UserView:
    return UserView(
        username=record.username,
        user_type=record.user_type,
        version=record.version if version is None else version,
        rules=rules,
    )
