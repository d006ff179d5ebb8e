"""CONSUMER_SEND_MSG_BACK (36): a consumer nacks a message; the broker re-publishes it to the
group's retry topic after its back-off, or to the group's DLQ once its retries are used up
(:func:`broker.send_back.send_back`, which every front calls; this module parses and answers).

Request header (RocketMQ's ConsumerSendMsgBackRequestHeader, the fields we use):
``group``, ``offset`` (the message's CommitLog offset), ``originTopic`` (the topic the
application consumed it from: its first topic, also for a retry copy), ``originMsgId``,
``maxReconsumeTimes`` (optional, lowers the group's setting) and ``reason`` (ours).

The message at ``offset`` must be a visible message of ``originTopic`` (or a retry copy in the
group's retry topic whose ``RETRY_TOPIC`` is ``originTopic``), and the request must come over a
connection a live member of ``group`` heart-beats on; else MESSAGE_NOT_FOUND or
NOT_GROUP_MEMBER, and nothing is stored. For a FIFO group (``consumeMessageOrderly``) or a group
that does not consume retries, the message goes to the DLQ at once: FIFO members retry in place
and send a message back only once its retries are used up. The answer comes once the copy is as durable as a send
(flush, all-ack replicas). Its header: ``topic`` (retry or DLQ topic), ``msgId`` (the copy's
id), ``reconsumeTimes``, ``deadLetter`` and, for a retry, ``deliverAtMs``.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.send_back import SendBackRefused, send_back
from protocol.broker_requests.send_back import SendBack
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response


class SendBackProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    async def send_back(self, conn: Connection, req: Frame) -> Frame:
        back = SendBack.parse(req.header, req.body)
        try:
            sent = await send_back(
                self.ctx,
                group=back.group,
                offset=back.offset,
                origin_topic=back.origin_topic,
                connection_id=id(conn),
                max_reconsume_times=back.max_reconsume_times,
                reason=back.reason,
            )
        except SendBackRefused as refused:
            return error_response(req, refused.code, refused.remark)
        return response(req, ResponseCode.SUCCESS, *sent.encode())
