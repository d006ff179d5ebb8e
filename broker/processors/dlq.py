"""A consumer group's dead-letter queue: QUERY_DLQ_MESSAGES (5200) lists it, RESEND_DLQ_MESSAGES
(5201) re-sends its messages to their original topic. Both are our own codes; the dead-letter
service (:mod:`broker.dlq.service`) decides, this processor translates.

The DLQ is ``%DLQ%<group>``, one queue, readable like any topic. QUERY_DLQ_MESSAGES (header
``consumerGroup``, optional ``offset`` and ``maxCount``) answers a msgpack map
``{"messages": [...], "nextOffset", "maxOffset"}``, each message
``{"msgId", "queueOffset", "originTopic", "originMsgId", "reconsumeTimes", "reason",
"storeTimestamp", "bodySize", "resent"}``; it reads only what consumers may see, on master and
slave alike.

RESEND_DLQ_MESSAGES (header ``consumerGroup`` and either ``msgId`` or ``all = true``; master
only) appends each message not re-sent before to its original topic as a fresh message (the
application's properties kept, the reconsume count reset, ``DLQ_RESENT_FROM`` naming the DLQ
message), waits until they are as durable as a send, then records them in the resend ledger
(``config/dlqResent.json``, copied by slaves) and answers
``{"resent": [{"dlqMsgId", "topic", "msgId"}], "skipped": [{"dlqMsgId", "why"}]}``.
A crash between the append and the ledger write sends those messages again on the next
request: re-sending is at least once, like every delivery.
"""

from __future__ import annotations

import msgpack

from broker.context import BrokerContext
from broker.dlq.service import DeadLetterService, DlqEntry, DlqRefused
from protocol.broker_requests.dlq import DlqQuery, DlqResend
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response


class DeadLetterProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.service: DeadLetterService = ctx.dead_letters

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_DLQ_MESSAGES, self.query)
        server.register(RequestCode.RESEND_DLQ_MESSAGES, self.resend)

    def query(self, conn: Connection, req: Frame) -> Frame:
        query = DlqQuery.parse(req.header, req.body)
        page = self.service.query(query.group, query.offset, query.max_count)
        body = {
            "messages": [_entry(m) for m in page.messages],
            "nextOffset": page.next_offset,
            "maxOffset": page.max_offset,
        }
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(body))

    async def resend(self, conn: Connection, req: Frame) -> Frame:
        resend = DlqResend.parse(req.header, req.body)
        try:
            done = await self.service.resend(resend.group, resend.msg_id)
        except DlqRefused as refused:
            return error_response(req, refused.code, refused.remark)
        body = {
            "resent": [
                {"dlqMsgId": r.dlq_msg_id, "topic": r.topic, "msgId": r.msg_id} for r in done.resent
            ],
            "skipped": [{"dlqMsgId": s.dlq_msg_id, "why": s.why} for s in done.skipped],
        }
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(body))


def _entry(m: DlqEntry) -> dict[str, object]:
    return {
        "msgId": m.msg_id,
        "queueOffset": m.queue_offset,
        "originTopic": m.origin_topic,
        "originMsgId": m.origin_msg_id,
        "reconsumeTimes": m.reconsume_times,
        "reason": m.reason,
        "storeTimestamp": m.store_timestamp,
        "bodySize": m.body_size,
        "resent": m.resent,
    }
