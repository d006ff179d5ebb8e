"""END_TRANSACTION (37): commit, roll back or leave open a transactional message
(docs/transactions.md, docs/protocol.md).

Request header: ``producerGroup``, ``transactionId``, ``commitLogOffset`` (the half's offset,
from its message id; -1 or absent: find it by ``transactionId``), ``commitOrRollback`` (8
commit, 12 rollback, 0 unknown), ``fromTransactionCheck?`` (bool: an answer to a check-back).

Answers: SUCCESS once what it wrote is as durable as a send (header ``state``: COMMIT,
ROLLBACK or OPEN; ``already``: true when the transaction was resolved that way before and
nothing was written); TRANSACTION_NOT_FOUND for an unknown transaction or another producer
group's; TRANSACTION_ALREADY_RESOLVED for the opposite of what resolved it. Nothing is stored
then.
"""

from __future__ import annotations

import structlog

from broker.context import BrokerContext
from broker.durable_wait import DurableAnswer, answer_when_durable
from broker.transaction.service import TransactionService
from broker.write_gate import WriteRefused
from protocol.broker_requests.transaction import EndTransaction, TransactionEnded
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from protocol.transaction import OpKind
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import DiskFullError, StoreError
from storage.store import MessageNotFoundError

log = structlog.get_logger(__name__)


class TransactionProcessor:
    def __init__(self, ctx: BrokerContext, service: TransactionService) -> None:
        self.ctx = ctx
        self.service = service

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end)

    def end(self, conn: Connection, req: Frame) -> Frame | DurableAnswer:
        ask = EndTransaction.parse(req.header, req.body)
        group, txn_id, offset, kind = ask.group, ask.transaction_id, ask.offset, ask.resolution
        from_check = ask.from_check
        try:
            self.ctx.check_writable()
        except WriteRefused as refused:
            return error_response(req, refused.code, refused.remark)
        try:
            outcome = self.service.end(group, txn_id, offset, kind)
        except MessageNotFoundError as exc:
            return error_response(
                req,
                ResponseCode.TRANSACTION_NOT_FOUND,
                f"transaction {txn_id!r}: its half message is gone ({exc})",
            )
        except StoreError as exc:
            log.error("end transaction failed", transaction_id=txn_id, error=str(exc))
            code = (
                ResponseCode.DISK_FULL
                if isinstance(exc, DiskFullError)
                else ResponseCode.SYSTEM_ERROR
            )
            return error_response(req, code, f"end transaction failed: {exc}")
        if from_check:
            log.info(
                "transaction check answered",
                transaction_id=txn_id,
                producer_group=group,
                answer=kind.name if kind is not None else "UNKNOWN",
            )
        if not outcome.known:
            where = f" (it belongs to producer group {outcome.group})" if outcome.group else ""
            return error_response(
                req,
                ResponseCode.TRANSACTION_NOT_FOUND,
                f"no transaction {txn_id!r} at offset {offset} in broker group "
                f"{self.ctx.cfg.broker_name} for producer group {group}{where}",
            )
        if outcome.already and kind is not None and outcome.resolution is not kind:
            done = outcome.resolution.name.lower() if outcome.resolution else "resolved"
            return error_response(
                req,
                ResponseCode.TRANSACTION_ALREADY_RESOLVED,
                f"transaction {txn_id!r} was {_past(done)} already",
            )
        ended = TransactionEnded(
            state=outcome.resolution.name if outcome.resolution is not None else "OPEN",
            already=outcome.already,
        )
        resp = response(req, ResponseCode.SUCCESS, *ended.encode())
        return answer_when_durable(self.ctx, outcome.result, req, resp)


def _past(outcome: str) -> str:
    return {
        OpKind.COMMIT.name.lower(): "committed",
        OpKind.ROLLBACK.name.lower(): "rolled back",
        OpKind.DISCARD.name.lower(): "discarded (never resolved)",
    }.get(outcome, outcome)
