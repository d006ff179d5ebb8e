"""Logging in with the cluster's own users (config key ``login``).

A user gives an access key and secret key; the console checks them by asking the cluster's
controllers, signed with them, for their metadata (any authenticated user may), then whether the
user may list users (super users only): a super user gets every action on the console, any other
user reads only. The session is kept here, in memory, under a random 256-bit id that is all the
browser's cookie holds (no secret in a page, a URL or a cookie); every request the console sends
for the user is signed with the user's own credentials (:func:`remoting.client.task_credentials`),
so the cluster's rules decide what the user sees. A session ends at logout, after
``session_hours``, or when the console restarts.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Final

from client.errors import BrokerError, ClientError
from protocol.codes import ResponseCode
from protocol.controller_requests.groups import GetMetadataInfo
from protocol.controller_requests.users import ListUsers
from protocol.request_auth import Credentials
from remoting.client import task_credentials
from remoting.errors import ResponseError
from rmqctl.controller_calls import call_controllers

SESSION_COOKIE: Final = "rmq_console_session"


class LoginRefused(ClientError):
    """Wrong credentials, or a cluster that refused them: one line for the login page."""


@dataclass(frozen=True, slots=True)
class Session:
    cluster: str
    credentials: Credentials = field(repr=False)
    is_super: bool
    expires: float

    @property
    def user(self) -> str:
        return self.credentials.access_key


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

    def create(self, cluster: str, credentials: Credentials, is_super: bool) -> str:
        self._expire()
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = Session(cluster, credentials, is_super, time.monotonic() + self.seconds)
        return sid

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
