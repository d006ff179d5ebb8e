"""What a logged-in user may do on the console: each console action as the requests it sends,
decided over the user's rules by the cluster's own code (:mod:`protocol.request_permissions`:
which action on which resource each request needs, :func:`~protocol.request_permissions.authorize`
the decision). The pages show a form only when this allows it, and a POST is refused (403)
before anything is sent when it does not; the requests themselves are signed as the user, so the
cluster decides again.

A user's rules are read with the console's own credentials (only a super user may list rules):
without them, or when they are refused, the console knows no rule of the user and lets it read
only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import msgpack

from protocol.acl import Action, Effect, User, UserType
from protocol.codes import ControllerCode, RequestCode
from protocol.remoting import Frame, Header
from protocol.request_permissions import authorize, broker_checks, controller_checks

CONTROLLER: Final = "controller"
BROKER: Final = "broker"

Ask = tuple[str, int, Header, bytes | None]
"""(where it goes, request code, header, body): one request an action sends."""

Names = Mapping[str, str]
"""The names an action is about: ``topic``, ``group`` (empty: one the user types in)."""


def _group_body(group: str) -> bytes:
    packed: bytes = msgpack.packb({"groupName": group})
    return packed


#: console action -> the requests that change something, as the cluster checks them
ACTIONS: Final[dict[str, Callable[[Names], list[Ask]]]] = {
    "create-topic": lambda n: [
        (CONTROLLER, RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": n.get("topic", "")}, None)
    ],
    "delete-topic": lambda n: [
        (CONTROLLER, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": n.get("topic", "")}, None)
    ],
    "send": lambda n: [(BROKER, RequestCode.SEND_MESSAGE, {"topic": n.get("topic", "")}, None)],
    "reset-offset": lambda n: [
        (BROKER, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"group": n.get("group", "")}, None)
    ],
    "resend-dlq": lambda n: [
        (BROKER, RequestCode.RESEND_DLQ_MESSAGES, {"consumerGroup": n.get("group", "")}, None)
    ],
    "resend-message": lambda n: [
        (BROKER, RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": n.get("group", "")}, None)
    ],
    "delete-group": lambda n: [
        (CONTROLLER, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": n.get("group", "")}, None)
    ],
    "update-group": lambda n: [
        (
            BROKER,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            _group_body(n.get("group", "")),
        )
    ],
    "users": lambda n: [(CONTROLLER, ControllerCode.AUTH_UPDATE_USER, {}, None)],
    "create-static-topic": lambda n: [
        (
            CONTROLLER,
            ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC,
            {"topic": n.get("topic", "")},
            None,
        )
    ],
    "remap-static-topic": lambda n: [
        (CONTROLLER, ControllerCode.REMAP_STATIC_TOPIC, {"topic": n.get("topic", "")}, None)
    ],
}


@dataclass(frozen=True, slots=True)
class Rights:
    """Who acts on the console and what it may change. ``user`` None: anyone (login off);
    ``rules_known`` False: a normal user whose rules could not be read (reads only).
    ``source_ip`` is the console's address as the cluster sees it (rules limited to addresses
    count it)."""

    user: User | None
    rules_known: bool = True
    source_ip: str = "127.0.0.1"

    def refusal(self, action: str, names: Names) -> str | None:
        """Why the user may not do ``action`` on ``names`` (None: it may). A name left empty
        is one the user will type: allowed when some allow rule on that kind of resource
        names one of the actions needed."""
        user = self.user
        if user is None or user.type is UserType.SUPER:
            return None
        if not self.rules_known:
            return f"{user.username} may only read on this console (its rules could not be read)"
        for where, code, header, body in ACTIONS[action](names):
            frame = Frame(kind=0, code=code, opaque=0, header=header, body=body)
            checks = (broker_checks if where == BROKER else controller_checks)(frame, "")
            if checks is not None and any(not c.resource.name for c in checks):
                open_ok = all(
                    c.resource.name
                    or any(
                        r.effect is Effect.ALLOW
                        and r.resource.type is c.resource.type
                        and r.actions & set(c.actions)
                        for r in user.rules
                    )
                    for c in checks
                )
                if not open_ok:
                    return f"no rule of {user.username} allows {action.replace('-', ' ')}"
                continue
            decision = authorize(user, checks, self.source_ip, code)
            if not decision.allowed:
                return decision.reason
        return None

    def may(self, action: str, **names: str) -> bool:
        return self.refusal(action, names) is None

    @property
    def changes_anything(self) -> bool:
        """Whether the user may change anything at all (a read-only operator may not)."""
        user = self.user
        if user is None or user.type is UserType.SUPER:
            return True
        return self.rules_known and any(
            r.effect is Effect.ALLOW and r.actions - _READS for r in user.rules
        )


_READS: Final = frozenset({Action.SUB, Action.GET, Action.LIST})
