"""The NameServer's JSON bodies: TopicRouteData (GET_ROUTEINFO_BY_TOPIC), ClusterInfo
(GET_BROKER_CLUSTER_INFO) and TopicList (GET_ALL_TOPIC_LIST_FROM_NAMESERVER).

RocketMQ writes them with fastjson: object fields in name order, null fields left out. A route::

    {"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},
                     "brokerName":"broker-a","cluster":"DefaultCluster",
                     "enableActingMaster":false}],
     "filterServerTable":{},
     "queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,
                    "topicSysFlag":0,"writeQueueNums":4}]}

``brokerAddrs`` maps a broker id (Java ``Long``; 0 is the master) to its address. fastjson writes a
map key that is not a string as a bare number, so the default form above is not standard JSON
(``{0:"..."}``). The NameServer answers in that form to requests whose ``version`` is below
V4_9_4 (ordinal 401) unless their header sets ``acceptStandardJsonOnly``; the others get standard
JSON (fastjson's BrowserCompatible, QuoteFieldNames and MapSortField: ``{"0":"..."}``, non-ASCII
escaped). ali-ons sends version 121 (V3_4_9) and parses the answer with the lenient ``JSON2``
package because, its comment says, ``JSON.parse`` fails on it: old clients get the quirk form.
:func:`encode_route` writes either form; :func:`decode_route` reads both.

``orderTopicConf``, ``zoneName`` and ``topicQueueMappingByBroker`` (static topics) are written
only when set; a zoneName is a plain string; the static-topic mapping is not modelled here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from protocol.rocketmq_remoting.codes import VERSION_V4_9_4

__all__ = [
    "MASTER_ID",
    "BrokerData",
    "QueueData",
    "RouteError",
    "TopicRouteData",
    "decode_route",
    "encode_cluster_info",
    "encode_route",
    "encode_topic_list",
    "quote_integer_keys",
    "wants_standard_json",
]

MASTER_ID: Final = 0
PERM_PRIORITY: Final = 0x1 << 3
PERM_READ: Final = 0x1 << 2
PERM_WRITE: Final = 0x1 << 1
PERM_INHERIT: Final = 0x1 << 0


class RouteError(ValueError):
    """A route body that does not parse or has fields of the wrong type."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]
    """Broker id -> "host:port"; id 0 (:data:`MASTER_ID`) is the master."""
    enable_acting_master: bool = False
    zone_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRouteData:
    queue_datas: Sequence[QueueData]
    broker_datas: Sequence[BrokerData]
    order_topic_conf: str | None = None
    filter_server_table: Mapping[str, Sequence[str]] = field(default_factory=dict)


def wants_standard_json(version: int, accept_standard_json_only: bool = False) -> bool:
    """Whether a GET_ROUTEINFO_BY_TOPIC request gets standard JSON (the NameServer's rule)."""
    return version >= VERSION_V4_9_4 or accept_standard_json_only


def _text(value: str, standard: bool) -> str:
    return json.dumps(value, ensure_ascii=standard)


def _queue_data_json(q: QueueData, standard: bool) -> str:
    return (
        f'{{"brokerName":{_text(q.broker_name, standard)},"perm":{int(q.perm)},'
        f'"readQueueNums":{int(q.read_queue_nums)},"topicSysFlag":{int(q.topic_sys_flag)},'
        f'"writeQueueNums":{int(q.write_queue_nums)}}}'
    )


def _broker_data_json(b: BrokerData, standard: bool) -> str:
    addrs = ",".join(
        (f'"{int(bid)}"' if standard else str(int(bid))) + ":" + _text(addr, standard)
        for bid, addr in sorted(b.broker_addrs.items())
    )
    zone = "" if b.zone_name is None else f',"zoneName":{_text(b.zone_name, standard)}'
    return (
        f'{{"brokerAddrs":{{{addrs}}},"brokerName":{_text(b.broker_name, standard)},'
        f'"cluster":{_text(b.cluster, standard)},'
        f'"enableActingMaster":{"true" if b.enable_acting_master else "false"}{zone}}}'
    )


def encode_route(route: TopicRouteData, *, standard_json: bool) -> bytes:
    """The GET_ROUTEINFO_BY_TOPIC body: the quirk form (bare integer keys) unless
    ``standard_json`` (see :func:`wants_standard_json`)."""
    std = standard_json
    brokers = ",".join(_broker_data_json(b, std) for b in route.broker_datas)
    filters = json.dumps(
        {k: list(v) for k, v in sorted(route.filter_server_table.items())},
        ensure_ascii=std,
        separators=(",", ":"),
    )
    queues = ",".join(_queue_data_json(q, std) for q in route.queue_datas)
    order = (
        ""
        if route.order_topic_conf is None
        else f',"orderTopicConf":{_text(route.order_topic_conf, std)}'
    )
    text = (
        f'{{"brokerDatas":[{brokers}],"filterServerTable":{filters}{order},'
        f'"queueDatas":[{queues}]}}'
    )
    return text.encode("utf-8")


def encode_cluster_info(
    brokers: Iterable[BrokerData], clusters: Mapping[str, Iterable[str]], *, standard_json: bool
) -> bytes:
    """The GET_BROKER_CLUSTER_INFO body (ClusterInfo): ``brokerAddrTable`` (broker name ->
    BrokerData) and ``clusterAddrTable`` (cluster -> broker names). RocketMQ's NameServer
    writes it in fastjson's default form (bare integer keys) to every client version."""
    std = standard_json
    table = ",".join(
        f"{_text(b.broker_name, std)}:{_broker_data_json(b, std)}"
        for b in sorted(brokers, key=lambda b: b.broker_name)
    )
    cluster_table = json.dumps(
        {name: sorted(set(members)) for name, members in sorted(clusters.items())},
        ensure_ascii=std,
        separators=(",", ":"),
    )
    return f'{{"brokerAddrTable":{{{table}}},"clusterAddrTable":{cluster_table}}}'.encode()


def encode_topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """The GET_ALL_TOPIC_LIST_FROM_NAMESERVER body (TopicList)."""
    obj: dict[str, object] = {}
    if broker_addr is not None:
        obj["brokerAddr"] = broker_addr
    obj["topicList"] = sorted(set(topics))
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- decoding ------------------------------------------------------------------------------


def quote_integer_keys(text: str) -> str:
    """``text`` with every bare number in an object's key position quoted, so that fastjson's
    default output parses as standard JSON. Strings and array elements are left alone."""
    out: list[str] = []
    stack: list[str] = []
    last = ""  # the last character written outside strings and whitespace
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            last = '"'
            i = j + 1
            continue
        if (c.isdigit() or c == "-") and stack and stack[-1] == "{" and last in ("{", ","):
            j = i + 1
            while j < n and (text[j].isdigit() or text[j] in "+-.eE"):
                j += 1
            out.append(f'"{text[i:j]}"')
            last = '"'
            i = j
            continue
        if c in "{[":
            stack.append(c)
        elif c in "}]" and stack:
            stack.pop()
        if not c.isspace():
            last = c
        out.append(c)
        i += 1
    return "".join(out)


def decode_route(raw: bytes | bytearray | memoryview) -> TopicRouteData:
    """A TopicRouteData body in either form."""
    try:
        text = bytes(raw).decode("utf-8")
        obj = json.loads(quote_integer_keys(text))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RouteError(f"route body does not parse: {exc}") from None
    if type(obj) is not dict:
        raise RouteError("route body is not an object")
    queues = [_queue_data(q) for q in _list(obj, "queueDatas")]
    brokers = [_broker_data(b) for b in _list(obj, "brokerDatas")]
    filters_obj = obj.get("filterServerTable")
    if filters_obj is None:
        filters_obj = {}
    if type(filters_obj) is not dict or not all(
        type(v) is list and all(type(s) is str for s in v) for v in filters_obj.values()
    ):
        raise RouteError("filterServerTable is not a map of string lists")
    order = obj.get("orderTopicConf")
    if order is not None and type(order) is not str:
        raise RouteError("orderTopicConf is not a string")
    return TopicRouteData(
        queue_datas=queues,
        broker_datas=brokers,
        order_topic_conf=order,
        filter_server_table=filters_obj,
    )


def _list(obj: dict[str, Any], name: str) -> list[Any]:
    value = obj.get(name)
    if value is None:
        return []
    if type(value) is not list:
        raise RouteError(f"{name} is not an array")
    return value


def _field(obj: object, name: str, kind: type, where: str) -> Any:
    if type(obj) is not dict:
        raise RouteError(f"{where} entry is not an object")
    value = obj.get(name)
    if type(value) is not kind:
        raise RouteError(f"{where}.{name} is not {kind.__name__}")
    return value


def _queue_data(q: object) -> QueueData:
    return QueueData(
        broker_name=_field(q, "brokerName", str, "queueDatas"),
        read_queue_nums=_field(q, "readQueueNums", int, "queueDatas"),
        write_queue_nums=_field(q, "writeQueueNums", int, "queueDatas"),
        perm=_field(q, "perm", int, "queueDatas"),
        topic_sys_flag=_field(q, "topicSysFlag", int, "queueDatas"),
    )


def _broker_data(b: object) -> BrokerData:
    if type(b) is not dict:
        raise RouteError("brokerDatas entry is not an object")
    addrs_obj = _field(b, "brokerAddrs", dict, "brokerDatas")
    addrs: dict[int, str] = {}
    for key, addr in addrs_obj.items():
        try:
            bid = int(key)
        except ValueError:
            raise RouteError(f"brokerDatas.brokerAddrs key {key!r} is not a broker id") from None
        if type(addr) is not str:
            raise RouteError(f"brokerDatas.brokerAddrs[{bid}] is not a string")
        addrs[bid] = addr
    acting = b.get("enableActingMaster", False)
    zone = b.get("zoneName")
    if type(acting) is not bool or (zone is not None and type(zone) is not str):
        raise RouteError("brokerDatas.enableActingMaster or zoneName has the wrong type")
    return BrokerData(
        cluster=_field(b, "cluster", str, "brokerDatas"),
        broker_name=_field(b, "brokerName", str, "brokerDatas"),
        broker_addrs=addrs,
        enable_acting_master=acting,
        zone_name=zone,
    )
