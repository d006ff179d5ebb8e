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
from collections.abc import Mapping
from typing import Any

import msgpack
import structlog

from protocol.acl import AclError, User, rule_from_doc, user_type
from protocol.controller_requests.users import SyncUsers
from protocol.sealing import SealError, unseal
from remoting.errors import RemotingError
from remoting.failover import AddressFailover

log = structlog.get_logger(__name__)


class UsersError(ValueError):
    """An AUTH_SYNC_USERS answer that cannot be read."""


def decode_users(body: bytes | None, auth_key: bytes) -> dict[str, tuple[User, str | None]]:
    """username -> (user, secret) from an AUTH_SYNC_USERS body; a secret that does not unseal
    under ``auth_key`` (another key) is None: that user cannot sign in here."""
    try:
        doc = msgpack.unpackb(body or b"", raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise UsersError(f"undecodable users body: {type(exc).__name__}") from None
    raw = doc.get("users") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        raise UsersError("users body lacks a list of users")
    users: dict[str, tuple[User, str | None]] = {}
    for item in raw:
        if not isinstance(item, Mapping):
            raise UsersError("a user must be a map")
        name, sealed, rules = item.get("username"), item.get("sealedSecret"), item.get("rules")
        if (
            not isinstance(name, str)
            or not isinstance(sealed, bytes)
            or not isinstance(rules, list)
        ):
            raise UsersError("a user needs username, sealedSecret and rules")
        try:
            user = User(name, user_type(item.get("userType")), tuple(map(rule_from_doc, rules)))
        except AclError as exc:
            raise UsersError(f"user {name}: {exc}") from None
        try:
            secret: str | None = unseal(auth_key, sealed, name.encode()).decode()
        except (SealError, UnicodeDecodeError):
            secret = None
        users[name] = (user, secret)
    return users


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
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def refresh(self) -> bool:
        """One fetch; True when the table changed."""
        ask = SyncUsers(digest=self.digest)
        resp = await self._controllers.call(ask.code, *ask.encode(), timeout=3.0)
        digest = resp.header.get("digest")
        if not isinstance(digest, str):
            raise UsersError("answer lacks the digest")
        if resp.header.get("unchanged") is True:
            self.loaded = True
            return False
        self._users = decode_users(resp.body, self._key)
        self.digest = digest
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
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    def snapshot(self) -> dict[str, Any]:
        """For logs and tests: how many users, and the digest held."""
        return {"users": len(self._users), "digest": self.digest, "loaded": self.loaded}
