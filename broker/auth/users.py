"""The broker's copy of the users and rules the controllers hold, and how it stays current.

The controllers keep users in their Raft state with secrets sealed under the cluster's auth key;
a broker holding the same key fetches the whole table (AUTH_SYNC_USERS) and unseals the secrets
in memory, never writing them anywhere. It fetches again when a heartbeat answer carries a digest
other than the one it holds (a change is seen within a heartbeat interval, 500 ms by default),
and every ``auth_refresh_interval_ms`` in any case (the request then carries the digest and an
unchanged table costs no body). Until the first fetch succeeds only the cluster's own processes
are let in: every user is unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import structlog

from daemon.tasks import cancel_and_wait, sleep_or_wake
from protocol.acl import User
from protocol.controller_requests.users import SealedUser, SyncUsers, SyncUsersAnswer, sealed_users
from protocol.fields import FieldError
from protocol.sealing import SealError, unseal
from remoting.errors import RemotingError
from remoting.failover import AddressFailover

log = structlog.get_logger(__name__)


class UsersError(ValueError):
    """An AUTH_SYNC_USERS answer that cannot be read."""


def decode_users(body: bytes | None, auth_key: bytes) -> dict[str, tuple[User, str | None]]:
    """username -> (user, secret) from an AUTH_SYNC_USERS body (:func:`unseal_users`)."""
    try:
        return unseal_users(sealed_users(body), auth_key)
    except FieldError as exc:
        raise UsersError(str(exc)) from None


def unseal_users(
    users: Iterable[SealedUser], auth_key: bytes
) -> dict[str, tuple[User, str | None]]:
    """username -> (user, secret); a secret that does not unseal under ``auth_key`` (another
    key) is None: that user cannot sign in here."""
    table: dict[str, tuple[User, str | None]] = {}
    for sealed in users:
        name = sealed.user.username
        try:
            secret: str | None = unseal(auth_key, sealed.sealed_secret, name.encode()).decode()
        except (SealError, UnicodeDecodeError):
            secret = None
        table[name] = (sealed.user, secret)
    return table


class BrokerUsers:
    """The request guard's directory on a broker, refreshed from the controllers."""

    def __init__(self, auth_key: bytes, controllers: AddressFailover, interval_s: float) -> None:
        self._key = auth_key
        self._controllers = controllers
        self._interval = interval_s
        self._users: dict[str, tuple[User, str | None]] = {}
        self.digest = ""
        self.loaded = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def set_interval(self, interval_s: float) -> None:
        """Refresh every ``interval_s`` from the refresh now waiting on."""
        self._interval = interval_s

    # UserDirectory ------------------------------------------------------------------------------
    def secret(self, username: str) -> str | None:
        entry = self._users.get(username)
        return None if entry is None else entry[1]

    def user(self, username: str) -> User | None:
        entry = self._users.get(username)
        return None if entry is None else entry[0]

    # Refresh ------------------------------------------------------------------------------------
    def announced(self, digest: str) -> None:
        """A heartbeat answer's ``authDigest``: fetch now when it is not the one held."""
        if digest != self.digest:
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="auth-users")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    async def refresh(self) -> bool:
        """One fetch; True when the table changed."""
        ask = SyncUsers(digest=self.digest)
        resp = await self._controllers.call(ask.code, *ask.encode(), timeout=3.0)
        try:
            answer = SyncUsersAnswer.parse(resp.header, resp.body)
        except FieldError as exc:
            raise UsersError(str(exc)) from None
        if answer.users is None:
            self.loaded = True
            return False
        self._users = unseal_users(answer.users, self._key)
        self.digest = answer.digest
        if not self.loaded:
            log.info("users loaded from the controllers", users=len(self._users))
        self.loaded = True
        unsealed = [name for name, (_, secret) in self._users.items() if secret is None]
        if unsealed:
            log.error(
                "secrets that do not unseal with this broker's auth key (another key than the "
                "controllers'?): these users cannot sign in here",
                users=sorted(unsealed),
            )
        return True

    async def _run(self) -> None:
        delay = self._interval
        while True:
            try:
                await self.refresh()
                delay = self._interval
            except (RemotingError, UsersError) as exc:
                log.warning("fetching users from the controllers failed", error=str(exc))
                delay = min(self._interval, 1.0)  # not loaded or stale: try again soon
            self._wake.clear()
            await sleep_or_wake(self._wake, delay)

    def snapshot(self) -> dict[str, Any]:
        """For logs and tests: how many users, and the digest held."""
        return {"users": len(self._users), "digest": self.digest, "loaded": self.loaded}
