"""Messages this broker must store on a static topic queue that moved away: sent on to the
queue's newest item, on whichever group holds it now.

A scheduled message keeps the physical queue it was sent to. When it comes due after that
queue's mapping item was sealed (the logical queue moved to another group), appending it here
would put it past the seal, where no logical reader looks. The timer hands it to
:meth:`StaticForwarder.forward` instead: the route (GET_ROUTEINFO_BY_TOPIC from the controllers)
names the logical queue holding this group's physical queue and that queue's newest item; the
message goes there with SEND_MESSAGE to that group's master, signed as the cluster, without the
timer's own properties (``TIMER_OUT_MS`` and the like: a send may not carry them). It counts as
delivered only once that master acknowledged it (docs/static-topics.md, "Logical reads").
"""

from __future__ import annotations

from typing import Any

import msgpack

from broker.timer.records import RESERVED_PROPERTIES
from protocol.broker_requests.send import SendRequest
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.message import Message, encode_properties
from protocol.static_topic import newest, parse_queue
from remoting.client import ConnectionPool
from remoting.failover import AddressFailover

FORWARD_TIMEOUT_S = 5.0


class ForwardError(Exception):
    """The message could not be stored on the queue's newest item now (retried later)."""


class StaticForwarder:
    def __init__(
        self, controllers: AddressFailover, pool: ConnectionPool, broker_name: str
    ) -> None:
        self.controllers = controllers
        self.pool = pool
        self.broker_name = broker_name

    async def forward(self, msg: Message, topic: str, physical_queue: int) -> str:
        """Store ``msg`` on the newest item of the logical queue that holds ``physical_queue``
        of this group; the group it went to. :class:`ForwardError` when it was not stored."""
        try:
            ask = RouteQuery(topic=topic)
            frame = await self.controllers.call(ask.code, *ask.encode(), timeout=FORWARD_TIMEOUT_S)
            route: Any = msgpack.unpackb(frame.body or b"\x80", raw=False)
        except Exception as exc:  # any failure to learn the route: not forwarded now
            raise ForwardError(f"route of {topic} unavailable: {exc}") from None
        target = self._newest_item(route, topic, physical_queue)
        masters = {
            b.get("brokerName"): b.get("masterAddress")
            for b in route.get("brokers") or ()
            if isinstance(b, dict)
        }
        master = masters.get(target[0])
        if not isinstance(master, str) or not master:
            raise ForwardError(f"broker group {target[0]} of {topic} has no master right now")
        send = SendRequest(
            topic=topic,
            body=msg.body,
            queue_id=target[1],
            properties=encode_properties(
                {k: v for k, v in msg.all_properties().items() if k not in RESERVED_PROPERTIES}
            ).decode(),
            flag=msg.flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
        )
        try:
            conn = await self.pool.get(master)
            resp = await conn.request(send.code, *send.encode(), FORWARD_TIMEOUT_S)
        except Exception as exc:
            raise ForwardError(f"sending to {master} failed: {exc}") from None
        if resp.code != ResponseCode.SUCCESS:
            raise ForwardError(f"{master} refused: {resp.remark or resp.code}")
        return target[0]

    def _newest_item(self, route: Any, topic: str, physical_queue: int) -> tuple[str, int]:
        for doc in route.get("logicalQueues") or ():
            try:
                items = parse_queue(doc.get("items") if isinstance(doc, dict) else None)
            except ValueError:  # a malformed entry (MappingError is one too): not ours to judge
                continue
            if any(
                i.broker_name == self.broker_name and i.physical_queue == physical_queue
                for i in items
            ):
                last = newest(items)
                if last.broker_name == self.broker_name and last.physical_queue == physical_queue:
                    raise ForwardError(f"queue {physical_queue} of {topic} has not moved")
                return last.broker_name, last.physical_queue
        raise ForwardError(f"no logical queue of {topic} holds queue {physical_queue} here")
