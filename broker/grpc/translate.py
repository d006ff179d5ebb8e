"""Pure translation between the gRPC protocol's messages and the broker's remoting requests.

No I/O here: the service (:mod:`broker.grpc.service`) calls these on what it receives and sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from protocol.codes import ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.message import PROP_KEYS, PROP_TAGS, encode_properties
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.timer import PROP_START_DELIVER_TIME, PROP_UNIQ_KEY, REQUEST_PROPERTIES
from protocol.transaction import PROP_TRANSACTION_PREPARED

#: What a queue served here accepts (transactions are not served over gRPC yet).
ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY)

#: Property names the broker sets or reads itself: a client's user properties may not use them.
RESERVED_PROPERTIES = frozenset(
    {
        PROP_KEYS,
        PROP_TAGS,
        PROP_UNIQ_KEY,
        PROP_MESSAGE_GROUP,
        PROP_TRANSACTION_PREPARED,
        *REQUEST_PROPERTIES,
    }
)


class Refused(Exception):
    """A request the broker will not serve: the status code and message to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class SendRequest:
    """One message of a SendMessageRequest as the broker's SEND_MESSAGE (10) takes it."""

    message_id: str
    header: dict[str, str | int]
    body: bytes


def send_request(msg: pb.Message, peer: str, max_body_bytes: int) -> SendRequest:
    """The SEND_MESSAGE request for one gRPC message; :class:`Refused` for a bad one."""
    sysp = msg.system_properties
    topic = msg.topic.name
    if not topic:
        raise Refused(pb.ILLEGAL_TOPIC, "message topic is empty")
    if not sysp.message_id:
        raise Refused(pb.ILLEGAL_MESSAGE_ID, "system_properties.message_id is empty")
    if not msg.body:
        raise Refused(pb.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(msg.body) > max_body_bytes:
        raise Refused(
            pb.MESSAGE_BODY_TOO_LARGE,
            f"message body of {len(msg.body)} bytes exceeds {max_body_bytes}",
        )
    if sysp.body_encoding == pb.GZIP:
        raise Refused(pb.NOT_IMPLEMENTED, "gzip-encoded bodies are not accepted")
    kind = sysp.message_type
    if kind not in (pb.MESSAGE_TYPE_UNSPECIFIED, *ACCEPTED_TYPES):
        raise Refused(
            pb.NOT_IMPLEMENTED,
            f"message type {pb.MessageType.Name(kind)} is not served over gRPC yet",
        )
    props: dict[str, str] = {}
    for name, value in msg.user_properties.items():
        if name in RESERVED_PROPERTIES:
            raise Refused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name} is reserved")
        props[name] = value
    props[PROP_UNIQ_KEY] = sysp.message_id
    if sysp.HasField("message_group"):
        props[PROP_MESSAGE_GROUP] = sysp.message_group
    if sysp.HasField("delivery_timestamp"):
        ts = sysp.delivery_timestamp
        props[PROP_START_DELIVER_TIME] = str(ts.seconds * 1000 + ts.nanos // 1_000_000)
    header: dict[str, str | int] = {
        "topic": topic,
        "queueId": -1,
        "properties": encode_properties(props).decode(),
        "bornHost": peer,
    }
    if sysp.HasField("tag"):
        header["tags"] = sysp.tag
    if sysp.keys:
        header["keys"] = " ".join(sysp.keys)
    born = sysp.born_timestamp
    if born.seconds or born.nanos:
        header["bornTimestamp"] = born.seconds * 1000 + born.nanos // 1_000_000
    return SendRequest(sysp.message_id, header, msg.body)


#: The broker's remoting answers as gRPC status codes (anything else: INTERNAL_ERROR).
_CODES: Mapping[int, int] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.BAD_REQUEST: pb.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.TOO_MANY_IN_FLIGHT: pb.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
}


def status_code(remoting_code: int) -> int:
    return _CODES.get(remoting_code, pb.INTERNAL_ERROR)


def grpc_port_of(remoting_address: str) -> tuple[str, int]:
    """Another master's gRPC endpoint, from its remoting address: the default port (+2)."""
    host, _, port = remoting_address.rpartition(":")
    return host, int(port) + 2


def message_queues(
    topic: pb.Resource,
    route: Mapping[str, object],
    endpoint_of: Mapping[str, tuple[str, int]],
) -> list[pb.MessageQueue]:
    """The queues of a route body (GET_ROUTEINFO_BY_TOPIC, 105) as QueryRoute answers them:
    every broker group that has a master, as broker id 0 at its gRPC endpoint. ``endpoint_of``
    maps a master's remoting address to its gRPC endpoint when known (this broker's own);
    others take the default port."""
    queues: list[pb.MessageQueue] = []
    brokers = route.get("brokers")
    if not isinstance(brokers, list):
        raise Refused(pb.INTERNAL_ERROR, "malformed route from the controllers")
    for b in sorted(brokers, key=lambda b: str(b.get("brokerName", ""))):
        master = b.get("masterAddress")
        if not master:
            continue
        host, port = endpoint_of.get(master) or grpc_port_of(str(master))
        broker = pb.Broker(
            name=str(b["brokerName"]),
            id=0,
            endpoints=pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=port)]),
        )
        for qid in range(int(b["queues"])):
            queues.append(
                pb.MessageQueue(
                    topic=topic,
                    id=qid,
                    permission=pb.READ_WRITE,
                    broker=broker,
                    accept_message_types=ACCEPTED_TYPES,
                )
            )
    return queues
