"""Static topics on the controllers: UPDATE_AND_CREATE_STATIC_TOPIC (513) committed by the active
controller, GET_STATIC_TOPIC_MAPPING (5120) from any controller's applied state.

The mapping lives in the metadata state machine (:mod:`controller.metadata.static_topics`); the
create's decision also creates the physical queues as ordinary topics on the groups (UpdateTopic
events), which the group's brokers then get pushed like any topic.
"""

from __future__ import annotations

from typing import Any

import msgpack

from controller.metadata import MappingItem, ReplicasInfoManager, StaticTopicMapping
from controller.service.commit import DecisionCommitter
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused, refuse
from protocol.codes import ResponseCode
from protocol.fields import opt_str, req_int, req_str
from protocol.remoting import Frame, response
from remoting.server import Connection


def item_doc(item: MappingItem) -> dict[str, Any]:
    return {
        "brokerName": item.broker_name,
        "physicalQueue": item.physical_queue,
        "logicalStart": item.logical_start,
        "physicalStart": item.physical_start,
        "generation": item.generation,
        "logicalEnd": item.logical_end,
    }


def mapping_doc(topic: str, mapping: StaticTopicMapping) -> dict[str, Any]:
    """The document 513 and 5120 answer and ``rmqctl staticTopicMapping`` prints."""
    return {
        "topic": topic,
        "queues": [
            {"queueId": queue_id, "items": [item_doc(i) for i in items]}
            for queue_id, items in enumerate(mapping)
        ],
    }


class StaticTopicHandlers:
    def __init__(
        self, manager: ReplicasInfoManager, gate: LeadershipGate, committer: DecisionCommitter
    ) -> None:
        self.manager = manager
        self.gate = gate
        self.committer = committer

    async def create(self, conn: Connection, req: Frame) -> Frame:
        """Header ``topic``, ``queues``, ``brokerNames`` (';'-separated, optional: every group
        with a master). Answered with the mapping once its events are applied."""
        await self.gate.require_active()
        h = req.header
        topic = req_str(h, "topic")
        names = [n for n in opt_str(h, "brokerNames").split(";") if n]
        d = await self.committer.settle(
            self.manager.create_static_topic(topic, req_int(h, "queues"), names)
        )
        if not d.ok or d.response is None:
            raise refuse(d)
        return response(
            req, ResponseCode.SUCCESS, None, msgpack.packb(mapping_doc(topic, d.response))
        )

    async def mapping(self, conn: Connection, req: Frame) -> Frame:
        """Header ``topic``: its mapping, from this controller's applied state (after a read
        barrier on the leader); TOPIC_NOT_EXIST when it is not a static topic."""
        topic = req_str(req.header, "topic")
        await self.gate.route_view()
        found = self.manager.static_topic(topic)
        if found is None:
            raise Refused(ResponseCode.TOPIC_NOT_EXIST, f"{topic} is not a static topic")
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(mapping_doc(topic, found)))


def static_route(doc: dict[str, Any], mapping: StaticTopicMapping) -> dict[str, Any]:
    """A static topic's GET_ROUTEINFO_BY_TOPIC document: the groups' route plus, per logical
    queue, the group and physical queue of its newest item (``logicalQueues``), and per group the
    physical queues sends may go to (``writeQueues``: newest items that are open; a queue whose
    move is in progress is writable nowhere until its new item exists)."""
    logical = []
    writable: dict[str, list[int]] = {}
    for queue_id, items in enumerate(mapping):
        last = items[-1]
        logical.append(
            {
                "queueId": queue_id,
                "brokerName": last.broker_name,
                "physicalQueue": last.physical_queue,
            }
        )
        if last.logical_end is None:
            writable.setdefault(last.broker_name, []).append(last.physical_queue)
    brokers = [
        {**b, "writeQueues": sorted(writable.get(b["brokerName"], ()))} for b in doc["brokers"]
    ]
    return {**doc, "brokers": brokers, "logicalQueues": logical}
