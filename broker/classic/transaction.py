"""END_TRANSACTION (37) of classic transactional producers: the broker's own ending of a
transaction (:func:`broker.transaction.ending.end_transaction`), answered once what it wrote is
as durable as a send.

A classic producer names its transaction by the half message's ``UNIQ_KEY`` (the Java client's
``transactionId``) and its CommitLog offset (``commitLogOffset``, from the send's offset
message id); the classic send stores that key as the half's transaction id
(:func:`broker.classic.send.classic_message`), and its answer carries it as ``transactionId``.
``commitOrRollback``: 8 commit, 12 rollback, 0 unknown (the transaction stays open).

The check-back of a half whose group has a classic producer (one that named the group in its
HEART_BEAT, :mod:`broker.classic.clients`) goes to it as RocketMQ's broker sends it: a oneway
CHECK_TRANSACTION_STATE (39) with ``tranStateTableOffset`` (the half's offset in the half
queue), ``commitLogOffset``, ``msgId`` and ``transactionId`` (the half's UNIQ_KEY),
``offsetMsgId`` (its offset message id), and the half in the stored-message layout as the body,
its topic and queue the real ones (``REAL_TOPIC``/``REAL_QID``) as RocketMQ rewrites them. The
producer answers with END_TRANSACTION (above), ``fromTransactionCheck`` true.
"""

from __future__ import annotations

from broker.classic.codes import classic_code
from broker.classic.pull import stored_message
from broker.context import BrokerContext
from broker.durable_wait import wait_durable
from broker.transaction.ending import EndRefused, end_transaction
from broker.transaction.state import Half
from protocol.broker_requests.transaction import EndTransaction
from protocol.message import decode_record
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import CheckTransactionStateHeader, EndTransactionHeader
from protocol.rocketmq_remoting.message_decoder import encode_stored_messages
from protocol.transaction import PROP_REAL_QUEUE_ID, PROP_REAL_TOPIC
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["ClassicTransactions", "send_check_back"]


def send_check_back(session: ClassicSession, half: Half, raw: bytes) -> None:
    """The check-back of ``half`` (``raw``: its record) to the classic producer on ``session``."""
    rec = decode_record(raw)
    props = rec.properties
    real_queue = props.get(PROP_REAL_QUEUE_ID, "")
    stored = stored_message(
        rec,
        topic=props.get(PROP_REAL_TOPIC) or rec.topic,
        queue_id=int(real_queue) if real_queue.isdigit() else rec.queue_id,
    )
    header = CheckTransactionStateHeader(
        tran_state_table_offset=rec.queue_offset,
        commit_log_offset=half.offset,
        msg_id=half.transaction_id,
        transaction_id=half.transaction_id,
        offset_msg_id=stored.msg_id,
    )
    session.request(
        RequestCode.CHECK_TRANSACTION_STATE,
        header.ext_fields(),
        oneway=True,
        body=encode_stored_messages([stored]),
    )


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
