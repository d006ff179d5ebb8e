"""The request guard of a server with authentication on: verify, authorize, refuse, log, count.

:class:`RequestGuard` is installed as a :class:`~remoting.server.RemotingServer`'s ``guard``:
the server calls it with every request that has a handler, before the handler. It verifies the
signature (:func:`protocol.request_auth.verify`: known user, right secret, fresh timestamp,
unseen nonce), removes the signature fields from the header (handlers never see them) and sets
``verifiedUser`` there to the user (:data:`protocol.request_auth.VERIFIED_USER`), then asks
the daemon's ``authorize`` whether that user may send that request from that address. A refusal
answers NO_PERMISSION (16) with the reason in the remark (a oneway request gets no answer), is
counted by reason (``on_refused``) and logged at most once per source host per window (with how
many were not logged since), so a client retrying in a loop cannot flood the log.

The cluster's own processes sign with :func:`protocol.request_auth.cluster_credentials` and count
as a super user.

Sessions over TLS: a signed AUTHENTICATE request whose ChannelBinding names its own TLS
connection (:func:`protocol.request_auth.session_refusal`) makes the guard remember its user on
that connection; the connection's later requests may come unsigned and count as that user's. A
request that is signed anyway is verified as always. Each session request looks the user up
again (deleted: ``unknown_user``; new rules apply at once); when the user's secret is no longer
the one the session was opened with, the request is refused (``session``) and the connection
closed after the answer, so the client connects and authenticates again with what it holds now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import structlog

from protocol.acl import Decision, User, UserType
from protocol.codes import RequestCode, ResponseCode
from protocol.log_throttle import LogThrottle
from protocol.remoting import Frame, response
from protocol.request_auth import (
    ACCESS_KEY,
    CLUSTER_ACCESS_KEY,
    DEFAULT_MAX_NONCES_PER_USER,
    DENIED,
    SESSION,
    UNKNOWN_USER,
    VERIFIED_USER,
    Credentials,
    NonceCache,
    session_refusal,
    strip_auth_fields,
    verify,
)
from remoting.channel_binding import tls_unique
from remoting.client import wall_ms
from remoting.server import Connection, error_response

log = structlog.get_logger(__name__)

LOG_WINDOW_MS: Final = 60_000
_MAX_HOSTS: Final = 4096

CLUSTER_USER: Final = User(CLUSTER_ACCESS_KEY, UserType.SUPER)

Authorize = Callable[[User, Frame, str], Decision]
"""(user, request with the signature fields removed, source host) -> the decision."""


class UserDirectory(Protocol):
    """Where the guard looks users up (the controllers' table, or a broker's cache of it)."""

    def secret(self, username: str) -> str | None: ...

    def user(self, username: str) -> User | None: ...


class RefusalLog:
    """One server's refusals: each one counted (``on_refused(reason)``) and logged as ``event``
    at most once per source host per window (:class:`~protocol.log_throttle.LogThrottle`), saying how many from
    that host went unlogged since. The request guards of the remoting and gRPC ports and the
    client-certificate gate each keep one."""

    __slots__ = ("_event", "_on_refused", "_throttle")

    def __init__(
        self,
        event: str,
        on_refused: Callable[[str], None] | None = None,
        window_ms: int = LOG_WINDOW_MS,
    ) -> None:
        self._event = event
        self._on_refused = on_refused
        self._throttle = LogThrottle[str](window_ms, _MAX_HOSTS)

    def record(self, host: str, now_ms: int, reason: str, detail: str, **fields: object) -> None:
        """A refusal from ``host`` at ``now_ms``; ``fields`` (peer, user, ...) go into the log
        line before the reason."""
        if self._on_refused is not None:
            self._on_refused(reason)
        unlogged = self._throttle.admit(host, now_ms)
        if unlogged is not None:
            log.warning(
                self._event, **fields, reason=reason, detail=detail, not_logged_since=unlogged
            )

    def refuse(
        self,
        conn: Connection,
        req: Frame,
        now_ms: int,
        reason: str,
        detail: str,
        *,
        server: str,
        user: str | None,
        remark: str,
    ) -> Frame:
        """Record the refusal of ``req`` on ``conn`` (:meth:`record`, with the server, peer,
        request code and user) and answer it NO_PERMISSION saying ``remark``."""
        self.record(
            source_host(conn),
            now_ms,
            reason,
            detail,
            server=server,
            peer=conn.peer,
            code=req.code,
            user=user,
        )
        return error_response(req, ResponseCode.NO_PERMISSION, remark)


def source_host(conn: Connection) -> str:
    return conn.peer.rpartition(":")[0] or conn.peer


SESSION_ATTR: Final = "auth_session"
"""The key of a connection's :class:`Session` in its ``attrs``."""


class Session:
    """Who authenticated a TLS connection, with which secret, from which host."""

    __slots__ = ("host", "secret", "username")

    def __init__(self, username: str, secret: str, host: str) -> None:
        self.username = username
        self.secret = secret
        self.host = host


class RequestGuard:
    def __init__(
        self,
        directory: UserDirectory,
        authorize: Authorize,
        *,
        cluster: Credentials,
        window_ms: int,
        server: str,
        on_refused: Callable[[str], None] | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        max_nonces_per_user: int = DEFAULT_MAX_NONCES_PER_USER,
    ) -> None:
        self._directory = directory
        self._authorize = authorize
        self._cluster_secret = cluster.secret_key
        self._window_ms = window_ms
        self._server = server
        self._clock_ms = clock_ms
        self._nonces = NonceCache(window_ms, max_nonces_per_user)
        self._refusals = RefusalLog("request refused", on_refused)

    def _secret(self, username: str) -> str | None:
        if username == CLUSTER_ACCESS_KEY:
            return self._cluster_secret
        return self._directory.secret(username)

    def _user(self, username: str) -> User | None:
        if username == CLUSTER_ACCESS_KEY:
            return CLUSTER_USER
        return self._directory.user(username)

    def __call__(self, conn: Connection, req: Frame) -> Frame | None:
        """None: the request may go to its handler; else the answer to send instead (a refusal,
        or the answer to AUTHENTICATE)."""
        session: Session | None = conn.attrs.get(SESSION_ATTR)
        if session is not None and ACCESS_KEY not in req.header:
            return self._in_session(conn, req, session)
        now = self._clock_ms()
        verdict = verify(
            req.code,
            req.flags,
            req.header,
            req.body,
            secret_of=self._secret,
            now_ms=now,
            window_ms=self._window_ms,
            nonces=self._nonces,
        )
        if verdict.reason is not None:
            return self._refuse(conn, req, verdict.reason, verdict.detail, verdict.username, now)
        username = verdict.username or ""
        if req.code == RequestCode.AUTHENTICATE:
            return self._open_session(conn, req, username, now)
        strip_auth_fields(req.header, username)
        user = self._user(username)
        if user is None:  # deleted between the two look-ups
            return self._refuse(conn, req, UNKNOWN_USER, f"unknown user {username}", username, now)
        host = source_host(conn)
        decision = self._authorize(user, req, host)
        if not decision.allowed:
            return self._refuse(conn, req, DENIED, decision.reason, username, now)
        return None

    def _in_session(self, conn: Connection, req: Frame, session: Session) -> Frame | None:
        """An unsigned request on an authenticated connection (an unsigned AUTHENTICATE asks
        who the connection is: answered once the user and secret are checked like any other)."""
        name = session.username
        secret = self._secret(name)
        user = self._user(name)
        if secret is None or user is None:
            return self._refuse(
                conn, req, UNKNOWN_USER, f"unknown user {name}", name, self._clock_ms()
            )
        if secret != session.secret:
            del conn.attrs[SESSION_ATTR]
            refusal = self._refuse(
                conn,
                req,
                SESSION,
                f"the secret of {name} changed since this connection authenticated; connect again",
                name,
                self._clock_ms(),
            )
            conn.close_after_answers()
            return refusal
        if req.code == RequestCode.AUTHENTICATE:
            return response(req, ResponseCode.SUCCESS, {"remark": f"authenticated as {name}"})
        req.header[VERIFIED_USER] = name
        decision = self._authorize(user, req, session.host)
        if not decision.allowed:
            return self._refuse(conn, req, DENIED, decision.reason, name, self._clock_ms())
        return None

    def _open_session(self, conn: Connection, req: Frame, username: str, now: int) -> Frame:
        """A verified AUTHENTICATE: bind ``username`` to the connection, or say why not."""
        why = session_refusal(req.header, tls_unique(conn.transport))
        if why is not None:
            return self._refuse(conn, req, SESSION, why, username, now)
        secret = self._secret(username)
        if secret is None:  # deleted since it was verified
            return self._refuse(conn, req, SESSION, f"unknown user {username}", username, now)
        conn.attrs[SESSION_ATTR] = Session(username, secret, source_host(conn))
        log.debug("session opened", server=self._server, peer=conn.peer, user=username)
        return response(req, ResponseCode.SUCCESS, {"remark": f"authenticated as {username}"})

    def _refuse(
        self,
        conn: Connection,
        req: Frame,
        reason: str,
        detail: str,
        username: str | None,
        now_ms: int,
    ) -> Frame:
        return self._refusals.refuse(
            conn,
            req,
            now_ms,
            reason,
            detail,
            server=self._server,
            user=username,
            remark=f"{reason}: {detail}",
        )
