"""The deferred answer of a send waiting for its flush or replicas (:mod:`broker.processors.send`).

A module of its own, interpreted in both builds: it subclasses the remoting server's
:class:`~remoting.server.DeferredAnswer` (with ``__slots__``), which a compiled class cannot.
"""

from __future__ import annotations

from broker.durable_wait import DurableAnswer
from broker.send.service import SendService
from protocol.codes import ResponseCode
from protocol.remoting import Frame

__all__ = ["DurableSendAnswer"]


class DurableSendAnswer(DurableAnswer):
    """A send waiting for its flush or replicas: answered when the wait ends, its latency
    (and a failure) counted then."""

    __slots__ = ("service", "start")

    def __init__(self, service: SendService, req: Frame, resp: Frame, start: float) -> None:
        super().__init__(req, resp)
        self.service = service
        self.start = start

    def settled(self, code: int, remark: str) -> None:
        # a failure is counted once, and only while the answer is still owed
        self.service.settled(self.start, code if self.pending else ResponseCode.SUCCESS)
