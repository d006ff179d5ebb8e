"""END_TRANSACTION (37): commit, roll back or leave open a transactional message
(docs/transactions.md, docs/protocol.md).

Request header: ``producerGroup``, ``transactionId``, ``commitLogOffset`` (the half's offset,
from its message id; -1 or absent: find it by ``transactionId``), ``commitOrRollback`` (8
commit, 12 rollback, 0 unknown), ``fromTransactionCheck?`` (bool: an answer to a check-back).

Answers: SUCCESS once what it wrote is as durable as a send (header ``state``: COMMIT,
ROLLBACK or OPEN; ``already``: true when the transaction was resolved that way before and
nothing was written); TRANSACTION_NOT_FOUND for an unknown transaction or another producer
group's; TRANSACTION_ALREADY_RESOLVED for the opposite of what resolved it. Nothing is stored
then. The decisions are :func:`broker.transaction.ending.end_transaction`'s.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, answer_when_durable
from broker.transaction.ending import EndRefused, end_transaction
from broker.transaction.service import TransactionService
from protocol.broker_requests.transaction import EndTransaction, TransactionEnded
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response


class TransactionProcessor:
    def __init__(self, ctx: BrokerContext, service: TransactionService) -> None:
        self.ctx = ctx
        self.service = service

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end)

    def end(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        try:
            ended = end_transaction(self.service, EndTransaction.parse(req.header, req.body))
        except EndRefused as refused:
            return error_response(req, refused.code, refused.remark)
        answer = TransactionEnded(state=ended.state, already=ended.already)
        resp = response(req, ResponseCode.SUCCESS, *answer.encode())
        return answer_when_durable(self.ctx, ended.result, req, resp)
