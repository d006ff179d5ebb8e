"""The NameServer door: the classic RocketMQ clients' NameServer requests, on a controller's port.

A classic client (Java 4.x, rocketmq-client-go, ali-ons) is given a controller's address as its
NameServer. Its connection speaks RocketMQ's remoting protocol, told apart from ours on its
first bytes (:mod:`remoting.classic_door`); these handlers answer it from the documents the
route service already serves our own clients (:class:`~controller.service.topics_routes.
TopicRouteHandlers`: :meth:`route_doc`, :meth:`cluster_doc`, :meth:`topic_names`), translated
into RocketMQ's JSON (:mod:`protocol.rocketmq_remoting.route`):

- GET_ROUTEINFO_BY_TOPIC (105): TopicRouteData, one QueueData and one BrokerData per group;
  ``brokerAddrs`` maps 0 to the master (left out while the group has none: clients retry) and
  each slave's broker id to its address. The addresses are the brokers' client ports, which
  serve the classic door too. Fastjson's bare integer keys for request versions below 4.9.4
  unless ``acceptStandardJsonOnly`` asks for standard JSON. A static topic is refused
  (TOPIC_NOT_EXIST, the remark says so): its logical queues are routed to our SDK and the gRPC
  front only.
- GET_BROKER_CLUSTER_INFO (106): ClusterInfo (brokerAddrTable, clusterAddrTable).
- GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206): TopicList.

Every other code answers REQUEST_CODE_NOT_SUPPORTED (3) naming it.
"""

from __future__ import annotations

from typing import Any

from controller.service.requests import Refused
from controller.service.topics_routes import TopicRouteHandlers
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.route import (
    BrokerData,
    QueueData,
    TopicRouteData,
    encode_cluster_info,
    encode_route,
    encode_topic_list,
    wants_standard_json,
)
from protocol.topic_attrs import DEFAULT_PERM
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession

__all__ = ["NameServerDoor"]

_MASTER_ID = 0


def _broker_ids(cluster: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """address -> (cluster name, broker id) from the cluster document."""
    return {
        b["address"]: (name, int(b["brokerId"]))
        for name, brokers in cluster["clusters"].items()
        for b in brokers
    }


def route_data(route: dict[str, Any], cluster: dict[str, Any]) -> TopicRouteData:
    """Our route document as RocketMQ's TopicRouteData."""
    ids = _broker_ids(cluster)
    queue_datas = []
    broker_datas = []
    for b in route["brokers"]:
        name = b["brokerName"]
        addrs: dict[int, str] = {}
        cluster_name = ""
        master = b.get("masterAddress")
        if master:
            addrs[_MASTER_ID] = master
            cluster_name = ids.get(master, ("", 0))[0]
        for n, slave in enumerate(b.get("slaves", ()), start=1):
            known = ids.get(slave)
            cluster_name = cluster_name or (known[0] if known else "")
            # A slave keeps its own broker id; 0 is the master's alone.
            slave_id = known[1] if known is not None and known[1] != _MASTER_ID else n
            while slave_id in addrs:
                slave_id += 1
            addrs[slave_id] = slave
        queues = int(b["queues"])
        queue_datas.append(
            QueueData(
                broker_name=name,
                read_queue_nums=queues,
                write_queue_nums=queues,
                perm=int(b.get("perm", DEFAULT_PERM)),
            )
        )
        broker_datas.append(BrokerData(cluster=cluster_name, broker_name=name, broker_addrs=addrs))
    return TopicRouteData(queue_datas=queue_datas, broker_datas=broker_datas)


class NameServerDoor:
    """The handlers, registered on a :class:`ClassicDoor`."""

    def __init__(self, topics: TopicRouteHandlers) -> None:
        self.topics = topics

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route)
        door.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster_info)
        door.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.topic_list)

    async def route(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        topic = req.ext_fields.get("topic")
        if not topic:
            raise ClassicRefusal(ResponseCode.SYSTEM_ERROR, "the header has no topic")
        try:
            doc = await self.topics.route_doc(topic)
        except Refused as refused:
            raise ClassicRefusal(ResponseCode.TOPIC_NOT_EXIST, refused.remark) from None
        if "logicalQueues" in doc:
            raise ClassicRefusal(
                ResponseCode.TOPIC_NOT_EXIST,
                f"{topic} is a static topic: its logical queues are served to our SDK and the "
                "gRPC front only, not through the classic RocketMQ protocol",
            )
        cluster = await self.topics.cluster_doc()
        standard = wants_standard_json(
            req.version, req.ext_fields.get("acceptStandardJsonOnly", "").lower() == "true"
        )
        body = encode_route(route_data(doc, cluster), standard_json=standard)
        return make_response(req, ResponseCode.SUCCESS, body=body)

    async def cluster_info(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        cluster = await self.topics.cluster_doc()
        groups: dict[tuple[str, str], dict[int, str]] = {}
        members: dict[str, list[str]] = {}
        for cluster_name, brokers in cluster["clusters"].items():
            for b in brokers:
                name = b["brokerName"]
                members.setdefault(cluster_name, []).append(name)
                addrs = groups.setdefault((cluster_name, name), {})
                broker_id = _MASTER_ID if b["role"] == "MASTER" else int(b["brokerId"]) or 1
                addrs[broker_id] = b["address"]
        datas = [
            BrokerData(cluster=c, broker_name=name, broker_addrs=addrs)
            for (c, name), addrs in sorted(groups.items())
        ]
        body = encode_cluster_info(datas, members, standard_json=False)
        return make_response(req, ResponseCode.SUCCESS, body=body)

    async def topic_list(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        names = await self.topics.topic_names()
        return make_response(req, ResponseCode.SUCCESS, body=encode_topic_list(names))
