"""SQL92 subscriptions of RocketMQ's classic consumers (issue 32 item 1), raw classic frames
against a real broker. ali-ons subscribes by tags only (tests/alions), so the frames are built
here from RocketMQ's published layouts, as its Java push consumer sends them: the HEART_BEAT
declares the subscription (expressionType SQL92) and PULL_MESSAGE says expressionType SQL92
without carrying the expression (postSubscriptionWhenPull is off by default).

The pull serves exactly the matching messages and moves nextBeginOffset past the others; a pull
carrying its expression is filtered by it; a SQL92 pull of a group that declared none is
SUBSCRIPTION_NOT_EXIST; a malformed expression SUBSCRIPTION_PARSE_FAILED with its position; a
broker with enable_property_filter off answers SYSTEM_ERROR saying so (RocketMQ's answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.admin import Admin
from client.producer import Producer
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.message_decoder import decode_stored_messages
from tests.support.classic import Raw, consumer_heartbeat, pull_header
from tests.support.procs import BrokerProc, started

pytestmark = pytest.mark.multiprocess

TOPIC = "ClassicSql"
SENT = 100
EXPR = "color = 'red' AND size BETWEEN 3 AND 6"


def props_of(i: int) -> dict[str, str]:
    return {"color": ["red", "blue"][i % 2], "size": str(i % 10)}


def sql_heartbeat(client_id: str, group: str, expression: str) -> bytes:
    return consumer_heartbeat(
        client_id, group, TOPIC, expression, sql92=True, consume_from="CONSUME_FROM_FIRST_OFFSET"
    )


async def _fill(broker: BrokerProc) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, 1)
    async with Producer(broker.address) as producer:
        for i in range(SENT):
            await producer.send(TOPIC, f"m-{i}".encode(), tags="T", properties=props_of(i))


async def test_classic_sql92_subscriptions(tmp_path: Path) -> None:
    with started(BrokerProc(tmp_path, extra_toml="enable_property_filter = true\n")) as broker:
        await _fill(broker)
        raw = await Raw.open(broker.port)
        try:
            beat = await raw.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("c1", "SQLG", EXPR))
            assert beat.code == ResponseCode.SUCCESS, beat.remark
            want = [f"m-{i}" for i in range(SENT) if i % 2 == 0 and 3 <= i % 10 <= 6]

            # The heartbeat's expression, the pull carrying none.
            header = pull_header(TOPIC, 0, consumerGroup="SQLG", expressionType="SQL92")
            header["maxMsgNums"] = str(SENT)
            resp = await raw.call(RequestCode.PULL_MESSAGE, header)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            got = decode_stored_messages(resp.body)
            assert [m.body.decode() for m in got] == want
            assert all(m.properties["color"] == "red" for m in got)
            assert int(resp.ext_fields["nextBeginOffset"]) == SENT

            # A pull carrying its expression is filtered by it (sysFlag's subscription bit).
            carried = pull_header(
                TOPIC, 0, consumerGroup="Other", expressionType="SQL92", sysFlag="4",
                subscription="size > 8", maxMsgNums=str(SENT),
            )  # fmt: skip
            resp = await raw.call(RequestCode.PULL_MESSAGE, carried)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            bodies = [m.body.decode() for m in decode_stored_messages(resp.body)]
            assert bodies == [f"m-{i}" for i in range(SENT) if i % 10 == 9]

            # SQL92 for a group that declared none.
            none = pull_header(TOPIC, 0, consumerGroup="Nobody", expressionType="SQL92")
            resp = await raw.call(RequestCode.PULL_MESSAGE, none)
            assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST, resp.remark
            assert "declared no SQL92 subscription" in (resp.remark or "")

            # A malformed expression, declared or carried.
            await raw.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("c2", "BadG", "size >"))
            bad = pull_header(TOPIC, 0, consumerGroup="BadG", expressionType="SQL92")
            resp = await raw.call(RequestCode.PULL_MESSAGE, bad)
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, resp.remark
            assert "at position 6" in (resp.remark or ""), resp.remark

            # An expression type RocketMQ does not have.
            odd = pull_header(TOPIC, 0, expressionType="CLASS")
            resp = await raw.call(RequestCode.PULL_MESSAGE, odd)
            assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, resp.remark
        finally:
            raw.close()


async def test_classic_sql92_to_a_broker_with_filters_off(tmp_path: Path) -> None:
    with started(BrokerProc(tmp_path)) as broker:
        await _fill(broker)
        raw = await Raw.open(broker.port)
        try:
            await raw.call(RequestCode.HEART_BEAT, {}, sql_heartbeat("c1", "SQLG", EXPR))
            header = pull_header(TOPIC, 0, consumerGroup="SQLG", expressionType="SQL92")
            resp = await raw.call(RequestCode.PULL_MESSAGE, header)
            assert resp.code == ResponseCode.SYSTEM_ERROR, resp.remark
            assert "enable_property_filter" in (resp.remark or ""), resp.remark
            # Tags are served as before.
            resp = await raw.call(RequestCode.PULL_MESSAGE, pull_header(TOPIC, 0))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        finally:
            raw.close()
