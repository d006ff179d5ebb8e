"""The gRPC endpoint: ``apache.rocketmq.v2.MessagingService`` on grpcio's asyncio server.

A thin front end, like RocketMQ's proxy: QueryRoute asks the controllers (or a lone broker
itself) for the topic's route; SendMessage becomes this broker's SEND_MESSAGE over a loopback
remoting connection, so every check, wait and metric of the remoting path applies unchanged.
Telemetry answers each client Settings with the server's. RPCs not served yet answer gRPC
UNIMPLEMENTED (grpcio's default for a method the servicer does not override).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import msgpack
import structlog
from google.protobuf.duration_pb2 import Duration

from broker.grpc.translate import Refused, message_queues, send_request, status_code
from protocol.codes import RequestCode, ResponseCode
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2 import service_pb2_grpc
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover, describe_failure

log = structlog.get_logger(__name__)


def _status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message)  # type: ignore[arg-type]


def _peer(context: Any) -> str:
    """``ipv4:127.0.0.1:5000`` -> ``127.0.0.1:5000``."""
    peer = str(context.peer() or "")
    return peer.split(":", 1)[1] if peer.startswith(("ipv4:", "ipv6:")) else peer


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        local_address: str,
        route_addresses: list[str],
        own_endpoint: tuple[str, int],
        max_body_bytes: int,
    ) -> None:
        self.local_address = local_address
        self.own_endpoint = own_endpoint
        self.max_body_bytes = max_body_bytes
        self.pool = ConnectionPool()
        self.routes = AddressFailover(route_addresses, self.pool)

    def close(self) -> None:
        self.pool.close()

    async def QueryRoute(self, request: rpc.QueryRouteRequest, context: Any) -> Any:
        topic = request.topic.name
        if not topic:
            return rpc.QueryRouteResponse(status=_status(pb.ILLEGAL_TOPIC, "topic is empty"))
        try:
            frame = await self.routes.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            route = msgpack.unpackb(frame.body or b"", raw=False)
            queues = message_queues(request.topic, route, {self.local_address: self.own_endpoint})
        except ResponseError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                return rpc.QueryRouteResponse(
                    status=_status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
                )
            return rpc.QueryRouteResponse(status=_status(status_code(exc.code), str(exc)))
        except Refused as exc:
            return rpc.QueryRouteResponse(status=_status(exc.code, exc.message))
        except (RemotingError, ValueError, TypeError, KeyError) as exc:
            log.warning("grpc QueryRoute failed", topic=topic, error=describe_failure(exc))
            return rpc.QueryRouteResponse(
                status=_status(pb.INTERNAL_ERROR, f"route unavailable: {describe_failure(exc)}")
            )
        if not queues:
            return rpc.QueryRouteResponse(
                status=_status(pb.NOT_FOUND, f"topic {topic} has no broker group with a master")
            )
        return rpc.QueryRouteResponse(status=_status(pb.OK), message_queues=queues)

    async def SendMessage(self, request: rpc.SendMessageRequest, context: Any) -> Any:
        if not request.messages:
            return rpc.SendMessageResponse(status=_status(pb.BAD_REQUEST, "no message to send"))
        peer = _peer(context)
        entries = [await self._send_one(m, peer) for m in request.messages]
        first = entries[0].status
        if any(e.status.code != first.code for e in entries):
            first = _status(pb.MULTIPLE_RESULTS, "the messages had different results")
        return rpc.SendMessageResponse(status=first, entries=entries)

    async def _send_one(self, msg: pb.Message, peer: str) -> rpc.SendResultEntry:
        try:
            send = send_request(msg, peer, self.max_body_bytes)
        except Refused as exc:
            return rpc.SendResultEntry(status=_status(exc.code, exc.message))
        try:
            conn = await self.pool.get(self.local_address)
            resp = await conn.request(RequestCode.SEND_MESSAGE, send.header, send.body)
        except RemotingError as exc:
            self.pool.drop(self.local_address)
            return rpc.SendResultEntry(
                status=_status(pb.INTERNAL_ERROR, f"store unavailable: {describe_failure(exc)}")
            )
        if resp.code != ResponseCode.SUCCESS:
            remark = resp.header.get("remark")
            return rpc.SendResultEntry(
                status=_status(status_code(resp.code), str(remark or "")),
                message_id=send.message_id,
            )
        offset = resp.header.get("queueOffset")
        return rpc.SendResultEntry(
            status=_status(pb.OK),
            message_id=send.message_id,
            offset=offset if isinstance(offset, int) else -1,
        )

    async def Heartbeat(self, request: rpc.HeartbeatRequest, context: Any) -> Any:
        return rpc.HeartbeatResponse(status=_status(pb.OK))

    async def NotifyClientTermination(
        self, request: rpc.NotifyClientTerminationRequest, context: Any
    ) -> Any:
        return rpc.NotifyClientTerminationResponse(status=_status(pb.OK))

    async def Telemetry(
        self, request_iterator: AsyncIterator[rpc.TelemetryCommand], context: Any
    ) -> AsyncIterator[rpc.TelemetryCommand]:
        async for command in request_iterator:
            if command.HasField("settings"):
                yield rpc.TelemetryCommand(
                    status=_status(pb.OK), settings=self.settings(command.settings)
                )

    def settings(self, client: pb.Settings) -> pb.Settings:
        """The server's answer to a client's settings: its own with the server's values."""
        out = pb.Settings()
        out.CopyFrom(client)
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=3,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=Duration(nanos=100_000_000), max=Duration(seconds=2), multiplier=2.0
                ),
            )
        )
        out.request_timeout.CopyFrom(Duration(seconds=3))
        if client.HasField("publishing"):
            out.publishing.max_body_size = self.max_body_bytes
            out.publishing.validate_message_type = True
        elif client.HasField("subscription"):
            out.subscription.fifo = False
            out.subscription.receive_batch_size = 32
            out.subscription.long_polling_timeout.CopyFrom(Duration(seconds=20))
        return out


class GrpcEndpoint:
    """The asyncio gRPC server of one broker."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        self.server: Any = None
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        self.port = server.add_insecure_port(f"{host}:{port}")
        await server.start()
        self.server = server
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(1.0)
            self.server = None
        self.service.close()
