"""Who may make a gRPC call: admission of every call before the endpoint forwards it.

Every call, authentication on or off, is refused UNSUPPORTED when its ``x-mq-namespace`` header
names a namespace (this broker has none; the resources' own ``resource_namespace`` is refused
where each RPC reads it, :func:`broker.grpc.translate.no_namespace`).

With the broker's authentication on, :class:`CallGuard` then verifies the call's
``authorization`` and ``x-mq-date-time`` headers (:func:`protocol.grpc_auth.verify_authorization`)
against the users the broker caches from the controllers (:mod:`broker.auth.users`), within the
broker's ``auth_timestamp_window_ms``, and decides the permissions the RPC needs
(:mod:`broker.grpc.permissions`) with the user's rules (:func:`protocol.acl.decide`). A call
that fails is answered the RPC's own response with status UNAUTHORIZED (40100: no or a malformed
signature, an unknown access key, a wrong secret, a date-time out of the window) or FORBIDDEN
(40300: a permission missing), the reason in the message; it is counted in
``rmq_broker_auth_refused_total{reason}`` as remoting refusals are, and logged at most once per
source host per minute. With authentication off every call is anonymous and admitted.

The endpoint's own requests to the masters then sign with the cluster's credentials: the check
made here is the one that counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from broker.grpc.permissions import rpc_checks, settings_checks
from broker.grpc.translate import Refused
from protocol.acl import User
from protocol.grpc_auth import AUTHORIZATION_HEADER, DATE_TIME_HEADER, verify_authorization
from protocol.request_auth import DENIED, UNKNOWN_USER
from protocol.request_permissions import Check, authorize
from protocol.rocketmq_v2 import definition_pb2 as pb
from remoting.auth import RefusalLog, UserDirectory
from remoting.client import wall_ms

NAMESPACE_HEADER: Final = "x-mq-namespace"


def metadata(context: Any, name: str) -> str:
    """The value of the call's ``name`` header ("" when it has none)."""
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""


def source_host(context: Any) -> str:
    """The client's address without its port: ``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``,
    ``ipv6:[::1]:5000`` -> ``::1``."""
    peer = str(context.peer() or "")
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    host = rest.rpartition(":")[0]
    return host.strip("[]") or rest


def check_namespace_header(context: Any) -> None:
    """:class:`Refused` (UNSUPPORTED) for a call whose client is configured with a namespace."""
    namespace = metadata(context, NAMESPACE_HEADER)
    if namespace:
        raise Refused(
            pb.UNSUPPORTED,
            f"the client is configured with namespace {namespace!r}: this broker has no "
            "namespaces (configure the client without one)",
        )


class CallGuard:
    """Authentication and authorization of the gRPC calls of a broker with authentication on."""

    def __init__(
        self,
        directory: UserDirectory,
        *,
        window_ms: int,
        on_refused: Callable[[str], None] | None = None,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self._directory = directory
        self._window_ms = window_ms
        self._clock_ms = clock_ms
        self._refusals = RefusalLog("grpc call refused", on_refused)

    def authenticate(self, method: str, context: Any) -> User:
        """The verified user of the call; :class:`Refused` (UNAUTHORIZED) otherwise."""
        now = self._clock_ms()
        verdict = verify_authorization(
            metadata(context, AUTHORIZATION_HEADER) or None,
            metadata(context, DATE_TIME_HEADER) or None,
            secret_of=self._directory.secret,
            now_ms=now,
            window_ms=self._window_ms,
        )
        if verdict.reason is not None:
            raise self._refuse(
                pb.UNAUTHORIZED, method, context, verdict.reason, verdict.detail, verdict.username
            )
        user = self._directory.user(verdict.username or "")
        if user is None:  # deleted between the two look-ups
            raise self._refuse(
                pb.UNAUTHORIZED, method, context, UNKNOWN_USER, "unknown user", verdict.username
            )
        return user

    def authorize(self, method: str, context: Any, user: User, checks: tuple[Check, ...]) -> None:
        """:class:`Refused` (FORBIDDEN) unless ``user`` passes every one of ``checks``."""
        decision = authorize(user, checks, source_host(context), 0)
        if not decision.allowed:
            raise self._refuse(
                pb.FORBIDDEN,
                method,
                context,
                DENIED,
                decision.reason,
                user.username,
            )

    def admit(self, method: str, request: Any, context: Any) -> User:
        """Authenticate the call and authorize what ``method`` with ``request`` needs."""
        user = self.authenticate(method, context)
        self.authorize(method, context, user, rpc_checks(method, request))
        return user

    def admit_settings(self, context: Any, user: User, settings: pb.Settings) -> None:
        """The Settings a client writes on a Telemetry stream opened by ``user``."""
        self.authorize("Telemetry", context, user, settings_checks(settings))

    def _refuse(
        self,
        code: int,
        method: str,
        context: Any,
        reason: str,
        detail: str,
        username: str | None,
    ) -> Refused:
        self._refusals.record(
            source_host(context),
            self._clock_ms(),
            reason,
            detail,
            method=method,
            peer=str(context.peer() or ""),
            user=username,
        )
        return Refused(code, f"{reason}: {detail}")
