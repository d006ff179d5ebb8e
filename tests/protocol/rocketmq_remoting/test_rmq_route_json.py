"""The NameServer's JSON bodies: the route in fastjson's default form (bare integer broker ids,
what clients below V4_9_4 such as ali-ons get) and in standard JSON, the cluster info and the
topic list. Golden texts are written by hand from fastjson's output rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.rocketmq_remoting.codes import VERSION_V3_4_9, VERSION_V4_9_4
from protocol.rocketmq_remoting.route import (
    BrokerData,
    QueueData,
    RouteError,
    TopicRouteData,
    decode_route,
    encode_cluster_info,
    encode_route,
    encode_topic_list,
    quote_integer_keys,
    wants_standard_json,
)

ROUTE = TopicRouteData(
    queue_datas=[QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6)],
    broker_datas=[
        BrokerData(
            cluster="DefaultCluster",
            broker_name="broker-a",
            broker_addrs={1: "10.0.0.2:10911", 0: "10.0.0.1:10911"},
        )
    ],
)

QUIRK = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],'
    b'"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
STANDARD = QUIRK.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')


def test_quirk_form_golden() -> None:
    assert encode_route(ROUTE, standard_json=False) == QUIRK
    with pytest.raises(json.JSONDecodeError):
        json.loads(QUIRK)  # not standard JSON: why old clients parse it leniently
    assert decode_route(QUIRK) == ROUTE


def test_standard_form_golden() -> None:
    assert encode_route(ROUTE, standard_json=True) == STANDARD
    assert json.loads(STANDARD)["brokerDatas"][0]["brokerAddrs"] == {
        "0": "10.0.0.1:10911",
        "1": "10.0.0.2:10911",
    }
    assert decode_route(STANDARD) == ROUTE


def test_which_clients_get_standard_json() -> None:
    assert not wants_standard_json(VERSION_V3_4_9)  # ali-ons
    assert not wants_standard_json(VERSION_V4_9_4 - 1)
    assert wants_standard_json(VERSION_V4_9_4)
    assert wants_standard_json(VERSION_V3_4_9, accept_standard_json_only=True)


def test_optional_fields_appear_when_set() -> None:
    route = TopicRouteData(
        queue_datas=[],
        broker_datas=[
            BrokerData(
                cluster="c",
                broker_name="b",
                broker_addrs={0: "h:1"},
                enable_acting_master=True,
                zone_name="z1",
            )
        ],
        order_topic_conf="b:4",
        filter_server_table={"h:1": ["f:2"]},
    )
    assert encode_route(route, standard_json=False) == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"h:1"},"brokerName":"b","cluster":"c",'
        b'"enableActingMaster":true,"zoneName":"z1"}],"filterServerTable":{"h:1":["f:2"]},'
        b'"orderTopicConf":"b:4","queueDatas":[]}'
    )
    assert decode_route(encode_route(route, standard_json=False)) == route


def test_standard_form_escapes_non_ascii_and_quirk_form_does_not() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData(broker_name="b\u00e9", read_queue_nums=1, write_queue_nums=1)],
        broker_datas=[],
    )
    assert "b\u00e9".encode() in encode_route(route, standard_json=False)
    assert b"b\\u00e9" in encode_route(route, standard_json=True)


def test_quote_integer_keys_touches_only_keys() -> None:
    text = '{"a":[1,2,{3:"x,4:y"}],"b":{-1:[5],"s":"{6:7}"},7:8}'
    assert quote_integer_keys(text) == '{"a":[1,2,{"3":"x,4:y"}],"b":{"-1":[5],"s":"{6:7}"},"7":8}'
    assert quote_integer_keys('{"q":"a\\"{1:2"}') == '{"q":"a\\"{1:2"}'


names = st.text(min_size=1, max_size=12)


@settings(deadline=None)
@given(
    st.lists(
        st.builds(
            QueueData,
            broker_name=names,
            read_queue_nums=st.integers(0, 64),
            write_queue_nums=st.integers(0, 64),
            perm=st.integers(0, 15),
            topic_sys_flag=st.integers(0, 3),
        ),
        max_size=3,
    ),
    st.lists(
        st.builds(
            BrokerData,
            cluster=names,
            broker_name=names,
            broker_addrs=st.dictionaries(st.integers(0, 9), names, max_size=3),
            enable_acting_master=st.booleans(),
            zone_name=st.none() | names,
        ),
        max_size=3,
    ),
    st.booleans(),
)
def test_route_round_trip(
    queues: list[QueueData], brokers: list[BrokerData], standard: bool
) -> None:
    route = TopicRouteData(queue_datas=queues, broker_datas=brokers)
    assert decode_route(encode_route(route, standard_json=standard)) == route


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        (b"[]", "not an object"),
        (b'{"queueDatas":{}}', "queueDatas is not an array"),
        (b'{"queueDatas":[{"brokerName":1}]}', "queueDatas.brokerName is not str"),
        (b'{"brokerDatas":[{"brokerAddrs":{x:"a"}}]}', "does not parse"),
        (b'{"brokerDatas":[{"brokerAddrs":{"x":"a"}}]}', "key 'x' is not a broker id"),
        (b'{"brokerDatas":[{"brokerAddrs":{0:1}}]}', "brokerAddrs[0] is not a string"),
        (b'{"brokerDatas":[7]}', "entry is not an object"),
        (b'{"filterServerTable":[]}', "filterServerTable"),
        (b"\xff", "does not parse"),
    ],
)
def test_bad_routes(raw: bytes, what: str) -> None:
    with pytest.raises(RouteError) as info:
        decode_route(raw)
    assert what in str(info.value)


def test_cluster_info_golden() -> None:
    brokers = [
        BrokerData(cluster="c1", broker_name="b2", broker_addrs={0: "h2:1"}),
        BrokerData(cluster="c1", broker_name="b1", broker_addrs={0: "h1:1", 2: "h3:1"}),
    ]
    assert encode_cluster_info(brokers, {"c1": ["b2", "b1"]}, standard_json=False) == (
        b'{"brokerAddrTable":{'
        b'"b1":{"brokerAddrs":{0:"h1:1",2:"h3:1"},"brokerName":"b1","cluster":"c1",'
        b'"enableActingMaster":false},'
        b'"b2":{"brokerAddrs":{0:"h2:1"},"brokerName":"b2","cluster":"c1",'
        b'"enableActingMaster":false}},'
        b'"clusterAddrTable":{"c1":["b1","b2"]}}'
    )


def test_topic_list_golden() -> None:
    assert encode_topic_list(["b", "a", "b"]) == b'{"topicList":["a","b"]}'
    assert encode_topic_list([], "h:1") == b'{"brokerAddr":"h:1","topicList":[]}'
