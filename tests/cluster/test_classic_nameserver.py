"""The NameServer door on real controllers: RocketMQ's route, cluster and topic-list requests
answered from the route service, in the JSON the classic clients parse (fastjson's bare integer
broker ids for old client versions, standard JSON for 4.9.4 on); with authentication on, the
classic doors of controllers and brokers refuse every unsigned request (NO_PERMISSION, the
remark says why) instead of serving it unauthenticated (signed requests:
tests/cluster/test_classic_acl.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.route import decode_route
from tests.cluster.secured import create_root, secured_cluster
from tests.cluster.support import create_once_registered
from tests.support.classic import Raw
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "RouteT"


async def test_the_controllers_answer_the_nameserver_requests(cluster: Cluster) -> None:
    group = cluster.add_group("broker-a", replicas=2)
    await create_once_registered(cluster, TOPIC, 3, "the topic to be created")
    controller = cluster.controllers[1]  # any controller answers, not only the leader
    raw = await Raw.open(controller.port)
    try:

        async def routed() -> bool:
            answer = await raw.call(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, version=121
            )
            if answer.code != ResponseCode.SUCCESS:
                return False
            addrs = decode_route(answer.body).broker_datas[0].broker_addrs
            return 0 in addrs and len(addrs) == 2  # the master and its slave registered it

        await wait_until_async(
            routed, "a route with the master and its slave", 30, on_timeout=cluster.logs
        )
        old = await raw.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, version=121)
        text = old.body.decode()
        with pytest.raises(ValueError):
            json.loads(text)  # fastjson's quirk: bare integer keys
        route = decode_route(old.body)
        (queues,) = route.queue_datas
        assert (queues.broker_name, queues.read_queue_nums, queues.write_queue_nums) == (
            "broker-a",
            3,
            3,
        )
        (broker,) = route.broker_datas
        addresses = {b.address for b in group}
        assert broker.broker_name == "broker-a" and set(broker.broker_addrs.values()) == addresses
        assert 0 in broker.broker_addrs and len(broker.broker_addrs) == 2

        new = await raw.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, version=401)
        doc = json.loads(new.body)  # standard JSON from 4.9.4 on
        assert set(doc["brokerDatas"][0]["brokerAddrs"]) == {str(i) for i in broker.broker_addrs}

        missing = await raw.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (
            missing.remark or ""
        )

        info = await raw.call(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        assert info.code == ResponseCode.SUCCESS
        assert b'"broker-a"' in info.body and all(a.encode() in info.body for a in addresses)

        topics = await raw.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        assert TOPIC in json.loads(topics.body)["topicList"]

        refused = await raw.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "x"})
        assert refused.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert str(int(RequestCode.GET_KVLIST_BY_NAMESPACE)) in (refused.remark or "")
    finally:
        raw.close()


async def test_with_authentication_on_the_classic_doors_refuse_everything(tmp_path: Path) -> None:
    cluster, key, settings = secured_cluster(tmp_path)
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        (broker,) = cluster.add_group("broker-a", replicas=1, config=settings)
        for port in (cluster.controllers[0].port, broker.port):
            raw = await Raw.open(port)
            try:
                answer = await raw.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
                assert answer.code == ResponseCode.NO_PERMISSION
                assert "ACL signature" in (answer.remark or "")
                send = await raw.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
                assert send.code == ResponseCode.NO_PERMISSION
            finally:
                raw.close()
    finally:
        cluster.stop()
