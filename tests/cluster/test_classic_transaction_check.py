"""The broker's transaction check-back reaches a classic producer (raw frames of RocketMQ's
remoting protocol, on a lone broker's client port): a producer that named its group in its
HEART_BEAT and left a half message open gets RocketMQ's oneway CHECK_TRANSACTION_STATE (39),
with its header fields and the half in the stored-message layout under its real topic and
queue; its END_TRANSACTION (fromTransactionCheck true) commits it and the message is pulled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.codes import RequestCode as OurCode
from protocol.message import parse_msg_id
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.headers import CheckTransactionStateHeader, SendMessageHeader
from protocol.rocketmq_remoting.message_decoder import decode_stored_messages
from protocol.rocketmq_remoting.properties import encode_properties
from remoting.client import RemotingClient
from tests.support.classic import Raw, pull_header
from tests.support.procs import BrokerProc, started

pytestmark = pytest.mark.multiprocess

TOPIC = "ClassicTxT"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProc]:
    proc = BrokerProc(
        tmp_path,
        extra_toml="transaction_check_first_ms = 300\ntransaction_check_interval_ms = 60000\n",
    )
    with started(proc):
        yield proc


async def test_a_classic_producer_gets_the_check_back_and_its_answer_commits(
    broker: BrokerProc,
) -> None:
    ours = await RemotingClient.connect(broker.address)
    try:
        await ours.call(OurCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 2})
    finally:
        ours.close()
    raw = await Raw.open(broker.port)
    try:
        beat = {"clientID": "10.0.0.5@tx", "producerDataSet": [{"groupName": "PG"}]}
        joined = await raw.call(RequestCode.HEART_BEAT, {}, json.dumps(beat).encode())
        assert joined.code == ResponseCode.SUCCESS, joined.remark
        props = {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "TX1", "TAGS": "TagT"}
        send = SendMessageHeader(
            producer_group="PG", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=1, sys_flag=4, born_timestamp=1_700_000_000_000, flag=0,
            properties=encode_properties({**props, "seq": "7"}),
        )  # fmt: skip
        half = await raw.call(RequestCode.SEND_MESSAGE_V2, send.ext_fields(short_names=True), b"tx")
        assert half.code == ResponseCode.SUCCESS, half.remark
        _, offset = parse_msg_id(half.ext_fields["msgId"])

        check = await raw.next_request()  # the half was left open: the broker asks
        assert (check.code, check.is_oneway) == (RequestCode.CHECK_TRANSACTION_STATE, True)
        assert CheckTransactionStateHeader.parse(check.ext_fields) == CheckTransactionStateHeader(
            tran_state_table_offset=0,  # the first half of the broker's half queue
            commit_log_offset=offset,
            msg_id="TX1",
            transaction_id="TX1",
            offset_msg_id=half.ext_fields["msgId"],
        )
        (msg,) = decode_stored_messages(check.body)
        assert (msg.topic, msg.queue_id, msg.body, msg.physical_offset) == (TOPIC, 1, b"tx", offset)
        assert msg.msg_id == half.ext_fields["msgId"]
        assert {k: msg.properties[k] for k in (*props, "seq")} == {**props, "seq": "7"}

        end = {
            "producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": str(offset),
            "commitOrRollback": "8", "msgId": "TX1", "transactionId": "TX1",
            "fromTransactionCheck": "true",
        }  # fmt: skip
        committed = await raw.call(RequestCode.END_TRANSACTION, end)
        assert committed.code == ResponseCode.SUCCESS, committed.remark
        shown = await raw.call(RequestCode.PULL_MESSAGE, pull_header(TOPIC, 1))
        assert [m.body for m in decode_stored_messages(shown.body)] == [b"tx"]
    finally:
        raw.close()
