"""The classic door: RocketMQ's own remoting protocol on a port that serves ours.

A :class:`ClassicDoor` is a :class:`remoting.server.SecondDoor`: a connection whose first frame
has a serialize type of 0 or 1 after its length (:func:`protocol.rocketmq_remoting.frame.sniff`;
ours has a msgpack array header there) is served by a :class:`ClassicSession`, which decodes
RocketMQ frames (:class:`~protocol.rocketmq_remoting.frame.CommandDecoder`) and hands each
request to the handler registered for its code. A handler gets ``(session, command)`` and
returns the answer, None (no answer), or an awaitable of either (run as a task, cancelled when
the connection closes). Answers go out in the serialize type of their request.

- a code without a handler answers REQUEST_CODE_NOT_SUPPORTED (3) with a remark naming it;
- a handler's :class:`ClassicRefusal` answers its code and remark; a ValueError (a header field
  missing or malformed: :class:`~protocol.rocketmq_remoting.headers.HeaderError`, a body that
  does not parse) answers SYSTEM_ERROR with its message, as RocketMQ does; anything else is
  logged and answers SYSTEM_ERROR;
- with ``authorizer`` set (authentication on: :mod:`remoting.classic_auth`),
  each request passes it first: a remark it returns answers NO_PERMISSION (16) with it
  (RocketMQ's ACL signature or the user's rules refused it);
- else with ``refusal`` set (a daemon with authentication on that checks no signature), every
  request answers NO_PERMISSION (16) with it: nothing may pass unauthenticated;
- a frame that does not decode closes the connection with one logged line (the server's
  ``bad_frame`` handling: the session's decoder stands in for ours).

The daemon decides the handlers: the controllers answer the NameServer requests
(:mod:`controller.nameserver`), the brokers the producer and consumer requests
(:mod:`broker.classic`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from protocol.refusal import RequestRefused
from protocol.rocketmq_remoting.codes import ResponseCode
from protocol.rocketmq_remoting.frame import (
    FLAG_ONEWAY,
    CommandDecoder,
    RemotingCommand,
    encode_command,
    make_response,
    sniff,
)
from remoting.server import Connection

__all__ = [
    "ClassicAnswer",
    "ClassicAuthorizer",
    "ClassicDoor",
    "ClassicHandler",
    "ClassicRefusal",
    "ClassicSession",
    "auth_refusal",
]

log = structlog.get_logger(__name__)

ClassicAnswer = RemotingCommand | asyncio.Future[RemotingCommand | None]
"""What a handler that answers from a callback returns: the answer, or a future of it (no task
per request; the session cancels it when the connection closes)."""
ClassicResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
ClassicHandler = Callable[["ClassicSession", RemotingCommand], ClassicResult]
ClassicAuthorizer = Callable[["ClassicSession", RemotingCommand], str | None]
"""(session, request) -> why it is refused (answered NO_PERMISSION), None: it passes."""


class ClassicRefusal(RequestRefused):
    """A request answered with an error code and remark."""


def auth_refusal(auth_enabled: bool) -> str | None:
    """The refusal of a daemon with authentication on (None: off)."""
    if not auth_enabled:
        return None
    return (
        "authentication is on and this cluster does not check RocketMQ's ACL signature yet: "
        "use our SDK or the gRPC front with credentials"
    )


class ClassicDoor:
    """The handlers by request code, and the sessions of the connections that speak it."""

    def __init__(self, name: str, max_frame_bytes: int, *, refusal: str | None = None) -> None:
        self.name = name
        self.max_frame_bytes = max_frame_bytes
        self.refusal = refusal
        """When set, every request answers NO_PERMISSION (16) with it (authentication is on and
        no ``authorizer`` checks RocketMQ's ACL signature: nothing may pass unauthenticated)."""
        self.authorizer: ClassicAuthorizer | None = None
        """When set, every request passes it before its handler (it replaces ``refusal``)."""
        self.handlers: dict[int, ClassicHandler] = {}
        self.sessions: set[ClassicSession] = set()
        self.on_close: list[Callable[[ClassicSession], None]] = []

    def register(self, code: int, handler: ClassicHandler) -> None:
        self.handlers[int(code)] = handler

    def sniff(self, prefix: bytes) -> bool | None:
        return sniff(prefix)

    def open(self, conn: Connection) -> ClassicSession:
        session = ClassicSession(self, conn)
        self.sessions.add(session)
        return session


class ClassicSession:
    """One connection speaking RocketMQ's remoting protocol."""

    def __init__(self, door: ClassicDoor, conn: Connection) -> None:
        self.door = door
        self.conn = conn
        self.decoder = CommandDecoder(min(door.max_frame_bytes, 16 * 1024 * 1024))
        self.attrs: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._futures: dict[asyncio.Future[RemotingCommand | None], RemotingCommand] = {}
        self._opaque = 0

    @property
    def peer(self) -> str:
        return self.conn.peer

    def handle(self, commands: list[RemotingCommand]) -> None:
        for cmd in commands:
            if self.conn.closed:
                return
            if cmd.is_response:
                continue  # no request of ours is outstanding
            self._dispatch(cmd)

    def closed(self) -> None:
        self.door.sessions.discard(self)
        for task in list(self._tasks):
            task.cancel()
        futures, self._futures = self._futures, {}
        for fut in futures:
            fut.cancel()
        for cb in self.door.on_close:
            cb(self)

    def request(
        self, code: int, ext_fields: dict[str, str], *, oneway: bool, body: bytes = b""
    ) -> None:
        """Send a request to the client (only oneway ones: no answer is awaited)."""
        self._opaque += 1
        self.send(
            RemotingCommand(
                code=code,
                opaque=self._opaque,
                flag=FLAG_ONEWAY if oneway else 0,
                ext_fields=ext_fields,
                body=body,
            )
        )

    def send(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd``: what is queued in one loop turn goes out in one write (the
        connection's :meth:`~remoting.server.Connection.send_bytes`)."""
        if not self.conn.closed:
            self.conn.send_bytes(encode_command(cmd))

    def _dispatch(self, cmd: RemotingCommand) -> None:
        refusal = (
            self.door.refusal if self.door.authorizer is None else self.door.authorizer(self, cmd)
        )
        if refusal is not None:
            self._reply(cmd, make_response(cmd, ResponseCode.NO_PERMISSION, remark=refusal))
            return
        handler = self.door.handlers.get(cmd.code)
        if handler is None:
            self._reply(
                cmd,
                make_response(
                    cmd,
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f"request code {cmd.code} is not supported by this "
                    f"{self.door.name}'s RocketMQ remoting door",
                ),
            )
            return
        try:
            result = handler(self, cmd)
        except Exception as exc:
            self._reply(cmd, self._failure(cmd, exc))
            return
        if isinstance(result, asyncio.Future):
            self._futures[result] = cmd
            result.add_done_callback(self._future_done)
            self.conn.add_inflight(1)
        elif inspect.isawaitable(result):
            task = asyncio.ensure_future(self._await(cmd, result))
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
            self.conn.add_inflight(1)  # reading pauses at the server's max_inflight
        else:
            self._reply(cmd, result)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self.conn.closed:
            self.conn.add_inflight(-1)

    def _future_done(self, fut: asyncio.Future[RemotingCommand | None]) -> None:
        cmd = self._futures.pop(fut, None)
        if cmd is None:  # the connection closed first and cancelled it
            return
        self.conn.add_inflight(-1)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is None:
            self._reply(cmd, fut.result())
        else:
            self._reply(
                cmd,
                self._failure(cmd, exc if isinstance(exc, Exception) else RuntimeError(repr(exc))),
            )

    async def _await(self, cmd: RemotingCommand, result: Awaitable[RemotingCommand | None]) -> None:
        try:
            answer = await result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer = self._failure(cmd, exc)
        self._reply(cmd, answer)

    def _reply(self, cmd: RemotingCommand, answer: RemotingCommand | None) -> None:
        if answer is None or cmd.is_oneway:
            return
        try:
            self.send(answer)
        except ValueError as exc:  # an answer we cannot encode: our bug, said as one
            self.send(self._failure(cmd, exc))

    def _failure(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        if isinstance(exc, ClassicRefusal):
            return make_response(cmd, exc.code, remark=exc.remark)
        if isinstance(exc, ValueError):
            return make_response(cmd, ResponseCode.SYSTEM_ERROR, remark=str(exc))
        log.error(
            "classic request failed",
            door=self.door.name,
            code=cmd.code,
            peer=self.peer,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
        )
        return make_response(cmd, ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
