"""Answering once a write is durable: the one way every writer waits until what it stored is as
durable as a send must be (the flush under ``flush = sync``, the SyncStateSet's acks under
all-ack; :meth:`broker.context.BrokerContext.when_durable`).

* :func:`answer_when_durable`, for a handler: the answer at once when there is nothing to wait
  for, else a :class:`DurableAnswer` the remoting server writes when the wait ends (no task,
  no future per request). Sends, POPs, acks, changes of invisible time, recalls (the timer's)
  and transaction ends answer this way.
* :func:`wait_durable`, for a coroutine that goes on after the wait (a long poll, a DLQ
  resend, a send-back).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from broker.durable import SUCCESS, DurableDone
from protocol.codes import ResponseCode
from protocol.remoting import Frame
from remoting.server import DeferredAnswer, error_response
from storage.store import PutResult

__all__ = [
    "Durability",
    "DurableAnswer",
    "answer_when_durable",
    "defer_until_durable",
    "wait_durable",
]


class Durability(Protocol):
    """What waiting for a write's durability needs (the broker's context has it)."""

    def needs_wait(self, result: PutResult) -> bool: ...

    def when_durable(self, result: PutResult, done: DurableDone) -> None: ...


class DurableAnswer(DeferredAnswer):
    """``resp``, written once the write it answers is durable; when durability failed, the
    error (code and remark, after ``what``: when given) instead. A subclass hears how the wait
    ended through :meth:`settled` (also when the connection closed meanwhile)."""

    __slots__ = ("req", "resp", "what")

    def __init__(self, req: Frame, resp: Frame, what: str = "") -> None:
        super().__init__()
        self.req = req
        self.resp = resp
        self.what = what

    def settled(self, code: int, remark: str) -> None:
        """How the wait ended, before the answer is written (a hook: nothing here)."""

    def done(self, code: int, remark: str) -> None:
        self.settled(code, remark)
        if not self.pending:  # answered already, or the connection closed meanwhile
            return
        if code == ResponseCode.SUCCESS:
            self.answer(self.resp)
        else:
            what = self.what
            self.answer(error_response(self.req, code, f"{what}: {remark}" if what else remark))


def answer_when_durable(
    durability: Durability, result: PutResult | None, req: Frame, resp: Frame, what: str = ""
) -> Frame | DurableAnswer:
    """``resp`` at once when ``result`` (None: nothing was written) needs no wait, else a
    :class:`DurableAnswer` written when the wait ends (the error, after ``what``, when
    durability failed)."""
    if result is None or not durability.needs_wait(result):
        return resp
    return defer_until_durable(durability, result, DurableAnswer(req, resp, what))


def defer_until_durable(
    durability: Durability, result: PutResult, answer: DurableAnswer
) -> DurableAnswer:
    """``answer``, written once ``result`` is durable (the caller checked that it must wait:
    ``durability.needs_wait(result)``)."""
    durability.when_durable(result, answer.done)
    return answer


async def wait_durable(durability: Durability, result: PutResult) -> tuple[int, str]:
    """(SUCCESS code, "") once ``result`` is as durable as a send must be (flush, replicas),
    else the error code and remark a send would be answered with."""
    if not durability.needs_wait(result):
        return SUCCESS
    fut: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()

    def done(code: int, remark: str) -> None:
        if not fut.done():
            fut.set_result((code, remark))

    durability.when_durable(result, done)
    return await fut
