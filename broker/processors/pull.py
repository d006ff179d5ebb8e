"""PULL_MESSAGE: the typed request to the pull service (:mod:`broker.pull.service`: limits, tag
filter, offset rules, long polling), its typed answer to the wire."""

from __future__ import annotations

from collections.abc import Awaitable

from broker.context import BrokerContext
from broker.pull.service import PullService
from protocol.codes import RequestCode
from protocol.pull import (
    PullAnswer,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRefused,
    PullRequest,
    PullRetry,
    encode_pull_answer,
)
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer


class PullProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.service: PullService = ctx.pulls

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.PULL_MESSAGE, self.pull)

    def pull(self, conn: Connection, req: Frame) -> Frame | Awaitable[Frame]:
        result = self.service.answer(PullRequest.parse(req.header, req.body))
        if isinstance(result, _ANSWERS):
            return _answer(req, result)
        return _answer_later(req, result)


_ANSWERS = (PullFound, PullNotFound, PullRetry, PullOffsetMoved, PullCorrupt, PullRefused)


async def _answer_later(req: Frame, later: Awaitable[PullAnswer]) -> Frame:
    return _answer(req, await later)


def _answer(req: Frame, answer: PullAnswer) -> Frame:
    code, header, body = encode_pull_answer(answer)
    return response(req, code, header, body)
