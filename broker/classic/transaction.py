"""END_TRANSACTION (37) of classic transactional producers: the broker's own ending of a
transaction (:func:`broker.transaction.ending.end_transaction`), answered once what it wrote is
as durable as a send.

A classic producer names its transaction by the half message's ``UNIQ_KEY`` (the Java client's
``transactionId``) and its CommitLog offset (``commitLogOffset``, from the send's offset
message id); the classic send stores that key as the half's transaction id
(:func:`broker.classic.send.classic_message`), and its answer carries it as ``transactionId``.
``commitOrRollback``: 8 commit, 12 rollback, 0 unknown (the transaction stays open). The
broker-to-client check-back (CHECK_TRANSACTION_STATE) is not sent to classic producers yet: a
half they never end is checked like any other with no producer of the group connected
(docs/transactions.md).
"""

from __future__ import annotations

from broker.classic.codes import classic_code
from broker.context import BrokerContext
from broker.durable_wait import wait_durable
from broker.transaction.ending import EndRefused, end_transaction
from protocol.broker_requests.transaction import EndTransaction
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import EndTransactionHeader
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["ClassicTransactions"]


class ClassicTransactions:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.END_TRANSACTION, self.end)

    async def end(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = EndTransactionHeader.parse(req.ext_fields)
        if not h.transaction_id:
            raise ClassicRefusal(
                ResponseCode.SYSTEM_ERROR, "END_TRANSACTION needs transactionId (the UNIQ_KEY)"
            )
        ask = EndTransaction(
            group=h.producer_group,
            transaction_id=h.transaction_id,
            offset=h.commit_log_offset,
            commit_or_rollback=h.commit_or_rollback,
            from_check=h.from_transaction_check,
        )
        try:
            ended = end_transaction(self.ctx.transactions, ask)
        except EndRefused as refused:
            raise ClassicRefusal(classic_code(refused.code), refused.remark) from None
        if ended.result is not None:
            code, remark = await wait_durable(self.ctx, ended.result)
            if code != ResponseCode.SUCCESS:
                raise ClassicRefusal(classic_code(code), remark)
        return make_response(req, ResponseCode.SUCCESS)
