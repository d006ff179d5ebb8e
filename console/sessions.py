"""Logging in with the cluster's own users (config key ``login``).

A user gives an access key and secret key; the console checks them by asking the cluster's
controllers, signed with them, for their metadata (any authenticated user may), then whether the
user may list users (super users only): a super user gets every action on the console. A normal
user gets what its rules allow (:mod:`console.rights`): they are read at login and again every
:data:`RULES_SECONDS` with the console's own credentials (only a super user may list rules);
without them the user reads only. The session is kept here, in memory, under a random 256-bit id that is all the
browser's cookie holds (no secret in a page, a URL or a cookie); every request the console sends
for the user is signed with the user's own credentials (:func:`remoting.client.task_credentials`),
so the cluster's rules decide what the user sees. A session ends at logout, after
``session_hours``, or when the console restarts.
"""

from __future__ import annotations

import dataclasses
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Final

from client.errors import BrokerError, ClientError
from console.rights import Rights
from protocol.acl import AclError, Rule, User, UserType, rule_from_doc
from protocol.codes import ResponseCode
from protocol.controller_requests.groups import GetMetadataInfo
from protocol.controller_requests.users import ListAcl, ListUsers
from protocol.request_auth import Credentials
from remoting.client import task_credentials
from remoting.errors import RemotingError, ResponseError
from rmqctl.controller_calls import answer_body, call_controllers

SESSION_COOKIE: Final = "rmq_console_session"
#: a normal user's rules are read again when older than this
RULES_SECONDS: Final = 30.0


class LoginRefused(ClientError):
    """Wrong credentials, or a cluster that refused them: one line for the login page."""


@dataclass(frozen=True, slots=True)
class Session:
    cluster: str
    credentials: Credentials = field(repr=False)
    is_super: bool
    expires: float
    #: a normal user's rules (None: they could not be read) and when they were read
    rules: tuple[Rule, ...] | None = None
    rules_read: float = 0.0
    #: the console's address as the cluster sees it (for rules limited to addresses)
    source_ip: str = "127.0.0.1"

    @property
    def user(self) -> str:
        return self.credentials.access_key

    @property
    def rights(self) -> Rights:
        kind = UserType.SUPER if self.is_super else UserType.NORMAL
        user = User(self.user, kind, self.rules or ())
        return Rights(user, self.is_super or self.rules is not None, self.source_ip)

    @property
    def rules_stale(self) -> bool:
        return not self.is_super and time.monotonic() - self.rules_read > RULES_SECONDS


async def read_rules(addresses: str, username: str, timeout: float) -> tuple[Rule, ...] | None:
    """``username``'s rules, asked with the console's own credentials (listAcl needs a super
    user); None when the cluster does not answer them or refuses."""
    with task_credentials(None):  # the process's own credentials, not the user's
        try:
            ask = ListAcl(username=username)
            resp = await call_controllers(addresses, ask.code, *ask.encode(), timeout=timeout)
            raw = answer_body(resp, "acls")
        except (ClientError, RemotingError):
            return None
    acls = raw.get("acls") if isinstance(raw, dict) else None
    if not isinstance(acls, list):
        return None
    try:
        return tuple(
            rule_from_doc(doc)
            for acl in acls
            if isinstance(acl, dict) and acl.get("username") == username
            for doc in acl.get("rules") or ()
        )
    except AclError:
        return None


def source_ip(addresses: str) -> str:
    """The console's address towards the first controller (a UDP socket's connect sends
    nothing); 127.0.0.1 when it cannot be found."""
    host, _, port = addresses.split(";")[0].strip().rpartition(":")
    try:
        info = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as sock:
            sock.connect(info[4])
            return str(sock.getsockname()[0])
    except (OSError, ValueError, IndexError):
        return "127.0.0.1"


async def check_user(addresses: str, credentials: Credentials, timeout: float) -> bool:
    """Whether ``credentials`` are a super user of the cluster at ``addresses``;
    :class:`LoginRefused` when the cluster does not accept them."""
    with task_credentials(credentials):
        try:
            ask = GetMetadataInfo()
            await call_controllers(addresses, ask.code, *ask.encode(), timeout=timeout)
        except (ResponseError, BrokerError) as exc:
            raise LoginRefused(
                f"login refused: the cluster did not accept {credentials.access_key!r} "
                f"({exc.remark})"
            ) from None
        try:
            users = ListUsers(prefix=credentials.access_key)
            await call_controllers(addresses, users.code, *users.encode(), timeout=timeout)
        except (ResponseError, BrokerError) as exc:
            if exc.code == ResponseCode.NO_PERMISSION:
                return False
            raise
    return True


class Sessions:
    """The logged-in users, by session id."""

    def __init__(self, hours: float) -> None:
        self.seconds = hours * 3600
        self._by_id: dict[str, Session] = {}

    def create(
        self,
        cluster: str,
        credentials: Credentials,
        is_super: bool,
        rules: tuple[Rule, ...] | None = None,
        source: str = "127.0.0.1",
    ) -> str:
        self._expire()
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        self._by_id[sid] = Session(
            cluster, credentials, is_super, now + self.seconds, rules, now, source
        )
        return sid

    def new_rules(self, sid: str, rules: tuple[Rule, ...] | None) -> Session | None:
        """The session ``sid`` with ``rules`` read now (None: it has ended)."""
        session = self._by_id.get(sid)
        if session is None:
            return None
        session = dataclasses.replace(session, rules=rules, rules_read=time.monotonic())
        self._by_id[sid] = session
        return session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        session = self._by_id.get(sid)
        if session is not None and session.expires < time.monotonic():
            del self._by_id[sid]
            return None
        return session

    def drop(self, sid: str | None) -> None:
        if sid:
            self._by_id.pop(sid, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [s for s, v in self._by_id.items() if v.expires < now]:
            del self._by_id[sid]
