"""The admin requests of mqadmin and the RocketMQ Dashboard on a real broker's classic door, as
raw RocketMQ frames: topic creation and the topic table, runtime info, subscription groups,
topic stats, consume stats and a group's connections, each read back in RocketMQ's bodies and
checked against what our own door says."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack
import pytest

from protocol.broker_requests.admin import TopicTable
from protocol.codes import RequestCode as OurCode
from protocol.rocketmq_remoting.admin_bodies import decode_mq_table
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import SerializeType
from protocol.rocketmq_remoting.headers import SendMessageHeader
from protocol.rocketmq_remoting.properties import encode_properties
from remoting.client import RemotingClient
from tests.broker.test_send_waits import start_master
from tests.support.classic import Raw, consumer_heartbeat, pull_header
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

TOPIC = "AdminT"


async def test_topics_are_created_and_listed_on_the_classic_door(broker: BrokerProc) -> None:
    raw = await Raw.open(broker.port)
    ours = await RemotingClient.connect(broker.address)
    try:
        create = {"topic": TOPIC, "readQueueNums": "3", "writeQueueNums": "3", "perm": "6"}
        created = await raw.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create)
        assert created.code == ResponseCode.SUCCESS, created.remark
        # The same topic through our own door: created by the same path.
        frame = await ours.call(OurCode.GET_ALL_TOPIC_CONFIG, {})
        assert TopicTable.parse(frame.header, frame.body).queues[TOPIC] == 3

        shrink = await raw.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {**create, "writeQueueNums": "2"}
        )
        assert shrink.code == ResponseCode.SYSTEM_ERROR
        assert shrink.remark is not None and "readQueueNums 3 differs" in shrink.remark
        shrink = await raw.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": "2", "writeQueueNums": "2"},
        )
        assert shrink.code == ResponseCode.SYSTEM_ERROR
        assert shrink.remark is not None and "shrinking is not supported" in shrink.remark

        listed = await raw.call(RequestCode.GET_ALL_TOPIC_CONFIG, {}, kind=SerializeType.ROCKETMQ)
        table = json.loads(listed.body)["topicConfigTable"]
        assert table[TOPIC] == {
            "topicName": TOPIC, "readQueueNums": 3, "writeQueueNums": 3, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False, "attributes": {},
        }  # fmt: skip
        assert "dataVersion" in json.loads(listed.body)

        info = await raw.call(RequestCode.GET_BROKER_RUNTIME_INFO, {})
        kv = json.loads(info.body)["table"]
        assert all(isinstance(v, str) for v in kv.values())
        assert (kv["brokerActive"], kv["role"], kv["brokerId"]) == ("true", "MASTER", "0")
        assert int(kv["commitLogMaxOffset"]) >= int(kv["commitLogMinOffset"]) >= 0
    finally:
        raw.close()
        ours.close()


async def test_stats_and_connections_on_the_classic_door(broker: BrokerProc) -> None:
    raw = await Raw.open(broker.port)
    try:
        created = await raw.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": TOPIC, "readQueueNums": "2", "writeQueueNums": "2"},
        )
        assert created.code == ResponseCode.SUCCESS, created.remark
        header = SendMessageHeader(
            producer_group="PG", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
            queue_id=1, sys_flag=0, born_timestamp=1_700_000_000_000, flag=0,
            properties=encode_properties({"TAGS": "a"}),
        )  # fmt: skip
        for _ in range(3):
            sent = await raw.call(
                RequestCode.SEND_MESSAGE_V2, header.ext_fields(short_names=True), b"x"
            )
            assert sent.code == ResponseCode.SUCCESS, sent.remark

        stats = await raw.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC})
        assert stats.code == ResponseCode.SUCCESS, stats.remark
        rows = decode_mq_table(stats.body.decode()[len('{"offsetTable":') : -1])
        name = next(iter(rows))[1]
        assert {k: (v["minOffset"], v["maxOffset"]) for k, v in rows.items()} == {
            (TOPIC, name, 0): (0, 0),
            (TOPIC, name, 1): (0, 3),
        }
        missing = await raw.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoSuchTopic"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST
        assert missing.remark == "topic NoSuchTopic does not exist"

        commit = {"consumerGroup": "G", "topic": TOPIC, "queueId": "1", "commitOffset": "2"}
        done = await raw.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)
        assert done.code == ResponseCode.SUCCESS
        consume = await raw.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G"})
        assert consume.code == ResponseCode.SUCCESS, consume.remark
        doc = consume.body.decode()
        assert doc.endswith(',"consumeTps":0.0}')
        offsets = decode_mq_table(doc[len('{"offsetTable":') :])
        assert {k[2]: (v["brokerOffset"], v["consumerOffset"]) for k, v in offsets.items()} == {
            0: (0, 0),
            1: (3, 2),
        }

        absent = await raw.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
        assert absent.code == ResponseCode.CONSUMER_NOT_ONLINE
        joined = await raw.call(RequestCode.HEART_BEAT, {}, consumer_heartbeat("c1@1", "G", TOPIC))
        assert joined.code == ResponseCode.SUCCESS
        conns = await raw.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
        assert conns.code == ResponseCode.SUCCESS, conns.remark
        body = json.loads(conns.body)
        ((member,),) = (body["connectionSet"],)
        assert member["clientId"] == "c1@1" and member["clientAddr"].startswith("127.0.0.1:")
        assert body["subscriptionTable"] == {TOPIC: {"topic": TOPIC}}
    finally:
        raw.close()


async def test_subscription_groups_on_the_classic_door(broker: BrokerProc) -> None:
    raw = await Raw.open(broker.port)
    ours = await RemotingClient.connect(broker.address)
    try:
        config = {
            "groupName": "G", "consumeEnable": True, "consumeBroadcastEnable": True,
            "retryQueueNums": 1, "retryMaxTimes": 3, "brokerId": 0,
            "consumeMessageOrderly": False,
        }  # fmt: skip
        updated = await raw.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, json.dumps(config).encode()
        )
        assert updated.code == ResponseCode.SUCCESS, updated.remark
        listed = await raw.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        group = json.loads(listed.body)["subscriptionGroupTable"]["G"]
        assert (group["groupName"], group["retryMaxTimes"], group["consumeEnable"]) == (
            "G",
            3,
            True,
        )
        # Our own door reads the same setting.
        frame = await ours.call(OurCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "G"})
        assert frame.body is not None and msgpack.unpackb(frame.body)["retryMaxTimes"] == 3

        stopped = await raw.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps({**config, "consumeEnable": False}).encode(),
        )
        assert stopped.code == ResponseCode.SYSTEM_ERROR
        assert stopped.remark is not None and "consumeEnable false" in stopped.remark
        bad = await raw.call(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps({**config, "retryMaxTimes": "three"}).encode(),
        )
        assert bad.code == ResponseCode.SYSTEM_ERROR
        assert bad.remark is not None and "retryMaxTimes" in bad.remark
        # Nothing of the refused ones was stored, and the connection still serves.
        listed = await raw.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
        assert json.loads(listed.body)["subscriptionGroupTable"]["G"]["retryMaxTimes"] == 3
    finally:
        raw.close()
        ours.close()


async def test_a_classic_topic_needs_the_controllers_in_controller_mode(tmp_path: Path) -> None:
    """The classic door creates topics as ours does: with the controllers unreachable the
    answer is retriable (SERVICE_NOT_AVAILABLE) and nothing is created, even on a master."""
    master = await start_master(tmp_path)  # controllers = 127.0.0.1:1: nobody listens there
    raw = await Raw.open(int(master.address.rsplit(":", 1)[1]))
    try:
        create = {"topic": "Orders", "readQueueNums": "4", "writeQueueNums": "4"}
        refused = await raw.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create)
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, refused.remark
        assert refused.remark is not None and "topic Orders not created" in refused.remark
        assert master.broker.ctx.topics.get("Orders") is None
        listed = await raw.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})
        assert "Orders" not in json.loads(listed.body)["topicConfigTable"]
    finally:
        raw.close()
        await master.broker.stop()


async def test_a_slave_between_masters_suggests_itself_to_classic_pulls(tmp_path: Path) -> None:
    """suggestWhichBrokerId: 0 (the master) while the group has one, as seen by a master and
    by a slave that knows its master; a slave that knows no master suggests its own broker id
    (as the NameServer lists it), so a classic consumer keeps reading from it meanwhile."""
    node = await start_master(tmp_path)
    ctx = node.broker.ctx
    ctx.create_topic("T", 4)
    raw = await Raw.open(int(node.address.rsplit(":", 1)[1]))
    pull = pull_header("T", 0)

    async def suggested() -> str:
        answer = await raw.call(RequestCode.PULL_MESSAGE, pull)
        return answer.ext_fields["suggestWhichBrokerId"]

    try:
        assert await suggested() == "0"  # the master itself
        ctx.role_cell.swap(is_master=False, broker_id=2, master_address="127.0.0.1:1")
        assert await suggested() == "0"  # a slave whose group has a master
        ctx.role_cell.swap(master_address="")
        assert await suggested() == "2"  # no master: this slave
    finally:
        raw.close()
        await node.broker.stop()
