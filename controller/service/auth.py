"""Users and access rules on the controllers: AUTH_CREATE_USER ... AUTH_LIST_ACL (3001-3010).

Writes are decided by the active controller and answered once their event is applied (as
UPDATE_AND_CREATE_TOPIC), so every controller agrees and a failover loses nothing; lists are
served like the other reads (the leader after a read barrier, a follower from its state).

Secrets arrive in the request body, are sealed under the cluster's auth key
(``auth_key_file``, :mod:`protocol.sealing`) before anything is decided, and leave only sealed:
no answer and no log line carries one. With ``auth_enabled`` the server's request guard lets only
super users reach these handlers (:mod:`protocol.request_permissions`).

AUTH_SYNC_USERS (5110) gives brokers every user with its secret still sealed (they hold the same
key) and its rules, and the table's digest; :class:`ControllerUsers` is the controller's own
directory for the request guard.
"""

from __future__ import annotations

import os
from typing import Any

import msgpack
import structlog

from controller.metadata import ReplicasInfoManager
from controller.metadata.auth import UserView
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, answer_of
from protocol.acl import (
    User,
    UserType,
)
from protocol.codes import ResponseCode
from protocol.controller_requests.users import (
    CreateAcl,
    CreateUser,
    DeleteAcl,
    DeleteUser,
    ListAcl,
    ListUsers,
    SyncUsers,
    UpdateAcl,
    UpdateUser,
)
from protocol.remoting import Frame, response
from protocol.sealing import NONCE_BYTES, SealError, key_id, seal, unseal
from remoting.server import Connection

log = structlog.get_logger(__name__)


def user_doc(view: UserView, *, rules: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "username": view.username,
        "userType": view.user_type.value,
        "version": view.version,
    }
    if rules:
        doc["rules"] = [rule.to_doc() for rule in view.rules]
    return doc


class ControllerUsers:
    """The users of this controller's applied state, secrets unsealed on first use (and again
    when the sealed form changes): the request guard's directory."""

    def __init__(self, manager: ReplicasInfoManager, auth_key: bytes) -> None:
        self._manager = manager
        self._key = auth_key
        self._secrets: dict[str, tuple[bytes, str | None]] = {}

    def secret(self, username: str) -> str | None:
        record = self._manager.auth.get(username)
        if record is None:
            return None
        cached = self._secrets.get(username)
        if cached is not None and cached[0] == record.sealed_secret:
            return cached[1]
        try:
            secret: str | None = unseal(self._key, record.sealed_secret, username.encode()).decode()
        except (SealError, UnicodeDecodeError):
            log.error("secret of user cannot be unsealed with this auth key", username=username)
            secret = None
        if len(self._secrets) > 4 * len(self._manager.auth.records()) + 64:
            self._secrets.clear()  # deleted users: start over rather than grow
        self._secrets[username] = (record.sealed_secret, secret)
        return secret

    def user(self, username: str) -> User | None:
        record = self._manager.auth.get(username)
        return None if record is None else record.user()


class AuthHandlers:
    def __init__(
        self,
        manager: ReplicasInfoManager,
        gate: LeadershipGate,
        committer: DecisionCommitter,
        auth_key: bytes | None,
    ) -> None:
        self.manager = manager
        self.gate = gate
        self.committer = committer
        self.auth_key = auth_key
        if auth_key is not None:
            log.info("auth key loaded", key_id=key_id(auth_key))

    def _seal(self, username: str, secret: str) -> bytes:
        if self.auth_key is None:  # checked before any decision; kept for the type checker
            raise self._no_key()
        return seal(self.auth_key, os.urandom(NONCE_BYTES), secret.encode(), username.encode())

    def _no_key(self) -> Refused:
        return Refused(
            ResponseCode.SERVICE_NOT_AVAILABLE,
            "this controller has no auth_key_file: users with secrets cannot be stored "
            "(docs/operations.md, Security)",
        )

    async def _commit_user(self, req: Frame, decision: Any, *, rules: bool = False) -> Frame:
        """Commit, then answer the user in the header (scalars) and, for the ACL requests, its
        rules as they now are in the body ({"rules": [...]})."""
        user = answer_of(await self.committer.settle(decision))
        body = _pack({"rules": user_doc(user, rules=True)["rules"]}) if rules else None
        return response(req, ResponseCode.SUCCESS, user_doc(user), body)

    # --- users ---------------------------------------------------------------------------------

    async def create_user(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        if self.auth_key is None:
            raise self._no_key()
        ask = CreateUser.parse(req.header, req.body)
        username = ask.username
        kind = ask.user_type or UserType.NORMAL
        d = self.manager.auth.create_user(username, ask.secret, kind, self._seal)
        resp = await self._commit_user(req, d)
        log.info("user created", username=username, user_type=kind.value)
        return resp

    async def update_user(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = UpdateUser.parse(req.header, req.body)
        username = ask.username
        secret = ask.secret
        if secret is not None and self.auth_key is None:
            raise self._no_key()
        d = self.manager.auth.update_user(username, secret, ask.user_type, self._seal)
        resp = await self._commit_user(req, d)
        log.info("user updated", username=username, secret_changed=secret is not None)
        return resp

    async def delete_user(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        username = DeleteUser.parse(req.header, req.body).username
        resp = await self._commit_user(req, self.manager.auth.delete_user(username))
        log.info("user deleted", username=username)
        return resp

    async def list_users(self, conn: Connection, req: Frame) -> Frame:
        prefix = ListUsers.parse(req.header, req.body).prefix
        await self.gate.read_view()
        users = [user_doc(v) for v in self.manager.auth.list_users(prefix)]
        return response(req, ResponseCode.SUCCESS, None, _pack({"users": users}))

    # --- access rules --------------------------------------------------------------------------

    async def create_acl(self, conn: Connection, req: Frame) -> Frame:
        return await self._put_acl(req, CreateAcl, create=True)

    async def update_acl(self, conn: Connection, req: Frame) -> Frame:
        return await self._put_acl(req, UpdateAcl, create=False)

    async def _put_acl(
        self, req: Frame, kind: type[CreateAcl] | type[UpdateAcl], *, create: bool
    ) -> Frame:
        await self.gate.require_active()
        ask = kind.parse(req.header, req.body)
        username = ask.username
        rules = list(ask.rules)
        d = self.manager.auth.put_acl(username, rules, create=create)
        resp = await self._commit_user(req, d, rules=True)
        log.info(
            "acl created" if create else "acl updated",
            username=username,
            resources=[str(r.resource) for r in rules],
        )
        return resp

    async def delete_acl(self, conn: Connection, req: Frame) -> Frame:
        await self.gate.require_active()
        ask = DeleteAcl.parse(req.header, req.body)
        username = ask.username
        patterns = list(ask.resources)
        d = self.manager.auth.delete_acl(username, patterns)
        resp = await self._commit_user(req, d, rules=True)
        log.info("acl deleted", username=username, resources=[str(p) for p in patterns] or "all")
        return resp

    async def sync_users(self, conn: Connection, req: Frame) -> Frame:
        """AUTH_SYNC_USERS: header ``digest`` (what the broker holds, optional). Answers header
        ``digest`` and ``unchanged`` (true: no body); otherwise body ``{"users": [{"username",
        "userType", "sealedSecret" (bin), "version", "rules"}]}``."""
        known = SyncUsers.parse(req.header, req.body).digest
        await self.gate.read_view()
        table = self.manager.auth
        digest = table.digest()
        if known == digest:
            return response(req, ResponseCode.SUCCESS, {"digest": digest, "unchanged": True})
        users = [
            {
                "username": r.username,
                "userType": r.user_type.value,
                "sealedSecret": r.sealed_secret,
                "version": r.version,
                "rules": [rule.to_doc() for rule in r.rules],
            }
            for r in table.records()
        ]
        return response(
            req,
            ResponseCode.SUCCESS,
            {"digest": digest, "unchanged": False},
            _pack({"users": users}),
        )

    async def list_acl(self, conn: Connection, req: Frame) -> Frame:
        ask = ListAcl.parse(req.header, req.body)
        await self.gate.read_view()
        views = self.manager.auth.list_acl(ask.username, ask.resource)
        acls = [user_doc(v, rules=True) for v in views]
        return response(req, ResponseCode.SUCCESS, None, _pack({"acls": acls}))


def _pack(doc: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return packed
