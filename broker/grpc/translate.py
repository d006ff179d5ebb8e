"""Pure translation between the gRPC protocol's messages and the broker's requests and messages.

No I/O here: the service (:mod:`broker.grpc.service`) calls these on what it receives and sends.
"""

from __future__ import annotations

import base64
import ipaddress
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from protocol.broker_requests.send import SendRequest as WireSend
from protocol.codes import ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP, message_group_error
from protocol.message import (
    PROP_KEYS,
    PROP_TAGS,
    Message,
    RecordError,
    encode_properties,
    parse_msg_id,
)
from protocol.remoting import Frame, Header
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_START_DELIVER_TIME,
    PROP_UNIQ_KEY,
    REQUEST_PROPERTIES,
)
from protocol.topic_attrs import PERM_READ, PERM_WRITE, MessageType, attrs_from
from protocol.trace import PROP_TRACE_CONTEXT
from protocol.transaction import (
    PROP_HALF_OFFSET,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    PROP_TRANSACTION_PREPARED,
)
from remoting.client import ConnectionPool
from remoting.errors import ConnectError, NotSentError, RemotingError
from remoting.failover import describe_failure

#: What a queue served here accepts: every type, unless the broker checks types
#: (``topic_message_type_check``) and the topic's ``message.type`` is not MIXED.
ACCEPTED_TYPES = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)
_PB_TYPES: Mapping[MessageType, tuple[pb.MessageType, ...]] = {
    MessageType.NORMAL: (pb.NORMAL,),
    MessageType.FIFO: (pb.FIFO,),
    MessageType.DELAY: (pb.DELAY,),
    MessageType.TRANSACTION: (pb.TRANSACTION,),
    MessageType.MIXED: ACCEPTED_TYPES,
}


def queue_permission(perm: int) -> pb.Permission:
    """PermName bits as the route's MessageQueue.permission."""
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    return pb.READ if readable else pb.WRITE if writable else pb.NONE


TRANSACTION_GROUP_PREFIX = "GRPC_TX_"
"""The producer group of a transactional message sent over gRPC is this prefix and its topic:
the official clients name no producer group, and every producer that publishes the topic can
answer its check-backs (an SDK TransactionProducer of that group too)."""

#: Property names the broker sets or reads itself: a client's user properties may not use them.
RESERVED_PROPERTIES = frozenset(
    {
        PROP_KEYS,
        PROP_TAGS,
        PROP_UNIQ_KEY,
        PROP_MESSAGE_GROUP,
        PROP_TRANSACTION_PREPARED,
        PROP_PRODUCER_GROUP,
        PROP_TRANSACTION_ID,
        PROP_HALF_OFFSET,
        PROP_REAL_TOPIC,
        PROP_REAL_QUEUE_ID,
        *REQUEST_PROPERTIES,
    }
)


class Refused(Exception):
    """A request the broker will not serve: the status code and message to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Unreached(Refused):
    """A request to another broker that got no answer (INTERNAL_ERROR with the reason)."""

    def __init__(self, address: str, exc: RemotingError) -> None:
        super().__init__(
            pb.INTERNAL_ERROR, f"broker {address} unavailable: {describe_failure(exc)}"
        )
        self.address = address
        self.sent = not isinstance(exc, ConnectError | NotSentError)
        """Whether the broker may have received it (and done it): False when the connection
        could not be made or was closed before the request was written, so nothing was done;
        True when it closed or timed out after the request was written."""


async def forward(
    pool: ConnectionPool,
    address: str,
    code: int,
    header: Header,
    body: bytes | None,
    timeout: float,
) -> Frame:
    """``code`` sent to the broker at ``address`` over ``pool``; when it fails the connection is
    dropped from the pool and the failure is :class:`Unreached` (a :class:`Refused`,
    INTERNAL_ERROR)."""
    try:
        conn = await pool.get(address)
        return await conn.request(code, header, body, timeout)
    except RemotingError as exc:
        pool.drop(address)
        raise Unreached(address, exc) from None


def no_namespace(resource: pb.Resource, what: str) -> None:
    """:class:`Refused` (UNSUPPORTED) for a resource in a namespace: RocketMQ's namespaces are
    not served, and dropping one would mix two applications' topics."""
    if resource.resource_namespace:
        raise Refused(
            pb.UNSUPPORTED,
            f"{what} {resource.name!r} is in namespace {resource.resource_namespace!r}: this "
            "broker has no namespaces (configure the client without one)",
        )


def no_namespace_in_settings(settings: pb.Settings) -> None:
    """:func:`no_namespace` for every topic and group of a client's Telemetry Settings."""
    if settings.HasField("publishing"):
        for topic in settings.publishing.topics:
            no_namespace(topic, "topic")
    if settings.HasField("subscription"):
        sub = settings.subscription
        no_namespace(sub.group, "consumer group")
        for entry in sub.subscriptions:
            no_namespace(entry.topic, "topic")


def transaction_group(topic: str) -> str:
    """The producer group of a gRPC transactional message of ``topic``."""
    return TRANSACTION_GROUP_PREFIX + topic


@dataclass(frozen=True, slots=True)
class SendRequest:
    """One message of a SendMessageRequest as the broker stores it: the send service takes
    :attr:`message` in-process, SEND_MESSAGE (10) takes :attr:`header` and :attr:`body`."""

    message_id: str
    message: Message
    """The message as the broker stores it (topic, body, tags, keys, properties, born time and
    host)."""
    kind: int
    """Its MessageType (NORMAL, FIFO, DELAY or TRANSACTION), inferred when the client left it
    unspecified."""

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def group(self) -> str | None:
        """Its FIFO message group (None: not a FIFO message)."""
        return self.message.properties.get(PROP_MESSAGE_GROUP)

    @property
    def wire(self) -> WireSend:
        """The SEND_MESSAGE request (queueId -1: the broker picks) a slave's endpoint forwards
        to its master."""
        m = self.message
        return WireSend(
            topic=m.topic,
            body=m.body,
            keys=m.keys,
            tags=m.tags,
            properties=encode_properties(m.properties).decode(),
            born_timestamp=m.born_timestamp,
            born_host=m.born_host,
        )

    @property
    def header(self) -> Header:
        """:attr:`wire`'s header."""
        return self.wire.encode()[0]


def _kind_of(sysp: pb.SystemProperties) -> int:
    """The message's type, checked against the properties that make one."""
    grouped = sysp.HasField("message_group")
    timed = sysp.HasField("delivery_timestamp")
    kind = sysp.message_type
    if kind == pb.MESSAGE_TYPE_UNSPECIFIED:
        if grouped and timed:
            raise Refused(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a message cannot have both a message group and a delivery timestamp",
            )
        return pb.FIFO if grouped else pb.DELAY if timed else pb.NORMAL
    if kind not in ACCEPTED_TYPES:
        raise Refused(
            pb.UNSUPPORTED, f"message type {pb.MessageType.Name(kind)} is not served here"
        )
    wanted = {pb.NORMAL: (False, False), pb.FIFO: (True, False), pb.DELAY: (False, True)}
    has = (grouped, timed)
    if has != wanted.get(kind, (False, False)):
        name = pb.MessageType.Name(kind)
        need = {
            pb.FIFO: "a message group and no delivery timestamp",
            pb.DELAY: "a delivery timestamp and no message group",
        }.get(kind, "neither a message group nor a delivery timestamp")
        raise Refused(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"a {name} message has {need}")
    return kind


def _body_of(msg: pb.Message, max_body_bytes: int) -> bytes:
    body = msg.body
    if msg.system_properties.body_encoding == pb.GZIP:
        inflate = zlib.decompressobj(wbits=47)  # gzip or zlib header
        try:
            body = inflate.decompress(body, max_body_bytes + 1)
        except zlib.error as exc:
            raise Refused(pb.MESSAGE_CORRUPTED, f"GZIP body does not inflate: {exc}") from None
        if not inflate.eof and len(body) <= max_body_bytes:
            raise Refused(pb.MESSAGE_CORRUPTED, "GZIP body is truncated")
    if len(body) > max_body_bytes:
        raise Refused(
            pb.MESSAGE_BODY_TOO_LARGE,
            f"message body of {len(body)} bytes exceeds the broker's max_message_bytes "
            f"{max_body_bytes}",
        )
    return body


def send_request(msg: pb.Message, peer: str, max_body_bytes: int) -> SendRequest:
    """One gRPC message as the broker stores it (``peer``: where it was born); :class:`Refused`
    for a bad one."""
    sysp = msg.system_properties
    topic = msg.topic.name
    if not topic:
        raise Refused(pb.ILLEGAL_TOPIC, "message topic is empty")
    no_namespace(msg.topic, "topic")
    if not sysp.message_id:
        raise Refused(pb.ILLEGAL_MESSAGE_ID, "system_properties.message_id is empty")
    if not msg.body:
        raise Refused(pb.MESSAGE_BODY_EMPTY, "message body is empty")
    body = _body_of(msg, max_body_bytes)
    kind = _kind_of(sysp)
    props: dict[str, str] = {}
    for name, value in msg.user_properties.items():
        if name in RESERVED_PROPERTIES:
            raise Refused(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name} is reserved")
        props[name] = value
    props[PROP_UNIQ_KEY] = sysp.message_id
    if sysp.HasField("trace_context") and sysp.trace_context:
        props[PROP_TRACE_CONTEXT] = sysp.trace_context  # W3C traceparent: kept, traced, shown
    if kind == pb.FIFO:
        bad = message_group_error(sysp.message_group)
        if bad is not None:
            raise Refused(pb.ILLEGAL_MESSAGE_GROUP, bad)
        props[PROP_MESSAGE_GROUP] = sysp.message_group
    elif kind == pb.DELAY:
        ts = sysp.delivery_timestamp
        props[PROP_START_DELIVER_TIME] = str(ts.seconds * 1000 + ts.nanos // 1_000_000)
    elif kind == pb.TRANSACTION:
        props[PROP_TRANSACTION_PREPARED] = "true"
        props[PROP_PRODUCER_GROUP] = transaction_group(topic)
        props[PROP_TRANSACTION_ID] = sysp.message_id
    born = sysp.born_timestamp
    message = Message(
        topic=topic,
        body=body,
        keys=" ".join(sysp.keys),
        tags=sysp.tag,
        properties=props,
        born_timestamp=born.seconds * 1000 + born.nanos // 1_000_000,
        born_host=peer,
    )
    return SendRequest(sysp.message_id, message, kind)


# -- handles the client keeps -------------------------------------------------------------------


def recall_handle(broker_name: str, msg_id: str) -> str:
    """The recall handle of a delay message: its broker group and the id of its scheduled
    record (what RECALL_MESSAGE takes), URL-safe base64 so the client keeps it opaque."""
    return base64.urlsafe_b64encode(f"v1 {broker_name} {msg_id}".encode()).decode()


def parse_recall_handle(handle: str) -> tuple[str, str]:
    """(broker group, scheduled record's id) of a recall handle; :class:`Refused` otherwise."""
    try:
        version, broker_name, msg_id = base64.urlsafe_b64decode(handle.encode()).decode().split()
        parse_msg_id(msg_id)
    except (ValueError, RecordError):
        raise Refused(pb.BAD_REQUEST, f"malformed recall handle {handle[:64]!r}") from None
    if version != "v1":
        raise Refused(pb.BAD_REQUEST, f"recall handle of unknown version {version!r}")
    return broker_name, msg_id


def half_offset_of(transaction_id: str) -> int:
    """The half message's CommitLog offset named by a transaction id this broker answered (the
    half's message id); :class:`Refused` otherwise."""
    try:
        return parse_msg_id(transaction_id)[1]
    except RecordError:
        raise Refused(
            pb.INVALID_TRANSACTION_ID, f"malformed transaction id {transaction_id[:64]!r}"
        ) from None


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
    ResponseCode.TRANSACTION_NOT_FOUND: pb.NOT_FOUND,
    ResponseCode.TRANSACTION_ALREADY_RESOLVED: pb.BAD_REQUEST,
    ResponseCode.QUERY_NOT_FOUND: pb.NOT_FOUND,
}


def status_code(remoting_code: int) -> int:
    return _CODES.get(remoting_code, pb.INTERNAL_ERROR)


def group_members(route: Mapping[str, object]) -> dict[str, list[str]]:
    """Broker group -> its brokers' remoting addresses, master first, of every group of a route
    body (GET_ROUTEINFO_BY_TOPIC, 105) that has a master."""
    brokers = route.get("brokers")
    if not isinstance(brokers, list):
        raise Refused(pb.INTERNAL_ERROR, "malformed route from the controllers")
    out: dict[str, list[str]] = {}
    for b in brokers:
        master = b.get("masterAddress")
        if master:
            slaves = [str(a) for a in b.get("slaves") or () if a and a != master]
            out[str(b["brokerName"])] = [str(master), *slaves]
    return out


def grpc_endpoints(addresses: Sequence[tuple[str, int]]) -> pb.Endpoints:
    """``Endpoints`` of gRPC addresses: IPv4 or IPv6 literals all of them; a host name only the
    first (the clients take one address under the DOMAIN_NAME scheme)."""
    kinds: set[int] = set()
    for host, _port in addresses:
        try:
            kinds.add(ipaddress.ip_address(host).version)
        except ValueError:
            kinds.add(0)
    if kinds == {4} or kinds == {6}:
        scheme = pb.IPv4 if kinds == {4} else pb.IPv6
        return pb.Endpoints(
            scheme=scheme, addresses=[pb.Address(host=h, port=p) for h, p in addresses]
        )
    host, port = addresses[0]
    return pb.Endpoints(scheme=pb.DOMAIN_NAME, addresses=[pb.Address(host=host, port=port)])


def message_queues(
    topic: pb.Resource,
    route: Mapping[str, object],
    endpoints: Mapping[str, Sequence[tuple[str, int]]],
    check_types: bool = False,
) -> list[pb.MessageQueue]:
    """The queues of a route body as QueryRoute answers them: every broker group that has a
    master and a known gRPC endpoint, as broker id 0 (the clients send only to id 0) whose
    ``Endpoints`` list the gRPC endpoints of its brokers (``endpoints``: group -> addresses).
    Any of them takes the group's writes (a slave's hands them to its master), so a client
    connected to one that dies moves to another by itself. Each queue's permission is the
    topic's on the group; it accepts the topic's message type when ``check_types`` (the
    broker's ``topic_message_type_check``), else every type."""
    queues: list[pb.MessageQueue] = []
    brokers = route.get("brokers")
    if not isinstance(brokers, list):
        raise Refused(pb.INTERNAL_ERROR, "malformed route from the controllers")
    for b in sorted(brokers, key=lambda b: str(b.get("brokerName", ""))):
        name = str(b.get("brokerName", ""))
        addresses = endpoints.get(name)
        if not b.get("masterAddress") or not addresses:
            continue
        broker = pb.Broker(name=name, id=0, endpoints=grpc_endpoints(addresses))
        try:
            attrs = attrs_from(b)
        except ValueError as exc:
            raise Refused(
                pb.INTERNAL_ERROR, f"malformed route from the controllers: {exc}"
            ) from None
        accepted = _PB_TYPES[attrs.message_type] if check_types else ACCEPTED_TYPES
        for qid in range(int(b["queues"])):
            queues.append(
                pb.MessageQueue(
                    topic=topic,
                    id=qid,
                    permission=queue_permission(attrs.perm),
                    broker=broker,
                    accept_message_types=accepted,
                )
            )
    return queues
