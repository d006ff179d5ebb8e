"""The gRPC endpoint: ``apache.rocketmq.v2.MessagingService`` on grpcio's asyncio server.

A thin front end, like RocketMQ's proxy: each RPC is translated (:mod:`broker.grpc.translate`)
into the broker's own requests and delegated (a SendMessage to the send service in-process while
this broker is its group's master: :mod:`broker.grpc.here`): QueryRoute asks the controllers (or a lone broker
itself) for the topic's route and the brokers for their gRPC endpoints
(:mod:`broker.grpc.endpoints`); the producer's RPCs go to :mod:`broker.grpc.produce`; Telemetry
to :mod:`broker.grpc.telemetry`; the consumer's (POP) to :mod:`broker.grpc.consume`, the pull
consumer's (PullMessage and the offsets) to :mod:`broker.grpc.pull`. RPCs not
served answer gRPC UNIMPLEMENTED (grpcio's default
for a method the servicer does not override).

Every call is admitted first (:mod:`broker.grpc.access`): refused UNSUPPORTED when the client is
configured with a namespace, and, with the broker's authentication on, UNAUTHORIZED or FORBIDDEN
unless its signature verifies and its user may do what the RPC does. The requests the endpoint
then sends to the masters sign with the cluster's credentials.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import msgpack
import structlog

from broker.grpc.access import CallGuard, check_namespace_header
from broker.grpc.consume import ConsumeService
from broker.grpc.consumers import grpc_client, peer_address
from broker.grpc.delivery import CONSUMER_TYPES
from broker.grpc.endpoints import ONE_ADDRESS_LANGUAGES, EndpointBook
from broker.grpc.here import Here
from broker.grpc.produce import Publisher
from broker.grpc.produce import status as _status
from broker.grpc.pull import PullFront
from broker.grpc.telemetry import TelemetryHub
from broker.grpc.tls_port import ServerCertificate
from broker.grpc.to_master import Master, MasterWatch
from broker.grpc.translate import (
    Refused,
    group_members,
    message_queues,
    no_namespace,
    status_code,
)
from protocol.acl import User
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.request_auth import Credentials
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2 import service_pb2_grpc
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover, describe_failure

log = structlog.get_logger(__name__)

#: Room above the largest body for the rest of a SendMessageRequest, so a body just over the
#: limit is answered MESSAGE_BODY_TOO_LARGE by the service (larger: RESOURCE_EXHAUSTED).
_REQUEST_OVERHEAD = 1 << 20


def _over_tls(context: Any) -> bool:
    return bool(context.auth_context().get("transport_security_type") == [b"ssl"])


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        local_address: str,
        route_addresses: list[str],
        max_body_bytes: int,
        broker_name: str = "",
        master_address: Callable[[], str] | None = None,
        *,
        master_now: Callable[[], Master] | None = None,
        credentials: Credentials | None = None,
        guard: CallGuard | None = None,
        here: Here | None = None,
        check_types: bool = False,
    ) -> None:
        """``check_types``: the broker's ``topic_message_type_check`` (a route's queues accept
        only their topic's message type). ``credentials``: what the endpoint's requests to the brokers and controllers sign
        with (the cluster's, with authentication on; None: unsigned). ``guard``: checks every
        call's signature and permissions (None: authentication off, every call anonymous).
        ``here``: this broker's services, called in-process while it is its group's master
        (None: every call goes over the network). ``master_now``: the group's master with its
        epoch, from the broker's role, which a request that could not reach the master waits
        on (:mod:`broker.grpc.to_master`; None: from ``master_address``)."""
        self.local_address = local_address
        self.max_body_bytes = max_body_bytes
        self.check_types = check_types
        self.guard = guard
        self.pool = ConnectionPool(credentials=credentials)
        self.routes = AddressFailover(route_addresses, self.pool)
        self.endpoints = EndpointBook(self.pool, local_address)
        master = master_address or (lambda: local_address)
        self.watch = (
            MasterWatch(master_now)
            if master_now is not None
            else MasterWatch.of_address(master, local_address)
        )
        self.publisher = Publisher(
            self.pool, self.routes, broker_name, max_body_bytes, self.watch, here
        )
        self.telemetry = TelemetryHub(self.pool, local_address, master, max_body_bytes)
        self.consume = ConsumeService(
            self.pool, local_address, master, broker_name, here, self.watch
        )
        self.telemetry.on_subscription = self.consume.subscription_settings
        self.pulls = PullFront(self.pool, local_address, master, broker_name)

    @property
    def own_endpoint(self) -> tuple[str, int] | None:
        return self.endpoints.own.plain

    def close(self) -> None:
        self.consume.close()
        self.pool.close()

    def _admit(self, method: str, request: Any, context: Any) -> User | None:
        """The call's user (None with authentication off); :class:`Refused` when the call may
        not go on."""
        check_namespace_header(context)
        if self.guard is None:
            return None
        return self.guard.admit(method, request, context)

    def _refusal(self, method: str, request: Any, context: Any) -> pb.Status | None:
        """None when the call may go on, else the status to answer it with."""
        try:
            self._admit(method, request, context)
        except Refused as exc:
            return _status(exc.code, exc.message)
        return None

    async def QueryRoute(self, request: rpc.QueryRouteRequest, context: Any) -> Any:
        if (refusal := self._refusal("QueryRoute", request, context)) is not None:
            return rpc.QueryRouteResponse(status=refusal)
        return await self._query_route(request, context)

    async def _query_route(self, request: rpc.QueryRouteRequest, context: Any) -> Any:
        topic = request.topic.name
        if not topic:
            return rpc.QueryRouteResponse(status=_status(pb.ILLEGAL_TOPIC, "topic is empty"))
        try:
            no_namespace(request.topic, "topic")
            ask = RouteQuery(topic=topic)
            frame = await self.routes.call(ask.code, *ask.encode())
            route = msgpack.unpackb(frame.body or b"", raw=False)
            tls = _over_tls(context)
            endpoints = {
                name: await self.endpoints.group(members, tls)
                for name, members in group_members(route).items()
            }
            if grpc_client(context).language in ONE_ADDRESS_LANGUAGES:
                endpoints = {n: self.endpoints.one_of(e, tls) for n, e in endpoints.items()}
            queues = message_queues(request.topic, route, endpoints, self.check_types)
        except ResponseError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                return rpc.QueryRouteResponse(
                    status=_status(pb.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
                )
            return rpc.QueryRouteResponse(status=_status(status_code(exc.code), str(exc)))
        except Refused as exc:
            return rpc.QueryRouteResponse(status=_status(exc.code, exc.message))
        except (RemotingError, ValueError, TypeError, KeyError, AttributeError) as exc:
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
        if (refusal := self._refusal("SendMessage", request, context)) is not None:
            return rpc.SendMessageResponse(status=refusal)
        return await self.publisher.send(request, peer_address(context), context.time_remaining())

    async def EndTransaction(self, request: rpc.EndTransactionRequest, context: Any) -> Any:
        if (refusal := self._refusal("EndTransaction", request, context)) is not None:
            return rpc.EndTransactionResponse(status=refusal)
        return await self.publisher.end_transaction(request, context.time_remaining())

    async def RecallMessage(self, request: rpc.RecallMessageRequest, context: Any) -> Any:
        if (refusal := self._refusal("RecallMessage", request, context)) is not None:
            return rpc.RecallMessageResponse(status=refusal)
        return await self.publisher.recall(request, context.time_remaining())

    async def Heartbeat(self, request: rpc.HeartbeatRequest, context: Any) -> Any:
        if (refusal := self._refusal("Heartbeat", request, context)) is not None:
            return rpc.HeartbeatResponse(status=refusal)
        if request.client_type in CONSUMER_TYPES:
            return await self.consume.heartbeat(request, context)
        return rpc.HeartbeatResponse(status=_status(pb.OK))

    async def NotifyClientTermination(
        self, request: rpc.NotifyClientTerminationRequest, context: Any
    ) -> Any:
        if (refusal := self._refusal("NotifyClientTermination", request, context)) is not None:
            return rpc.NotifyClientTerminationResponse(status=refusal)
        if request.group.name:  # a consumer (producers name no group)
            return await self.consume.terminated(request, context)
        return rpc.NotifyClientTerminationResponse(status=_status(pb.OK))

    # -- POP consumption: broker/grpc/consume.py ------------------------------------------------
    async def ReceiveMessage(
        self, request: rpc.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[rpc.ReceiveMessageResponse]:
        if (refusal := self._refusal("ReceiveMessage", request, context)) is not None:
            yield rpc.ReceiveMessageResponse(status=refusal)
            return
        async for response in self.consume.receive(request, context):
            yield response

    async def AckMessage(self, request: rpc.AckMessageRequest, context: Any) -> Any:
        if (refusal := self._refusal("AckMessage", request, context)) is not None:
            return rpc.AckMessageResponse(status=refusal)
        return await self.consume.ack(request, context)

    async def ChangeInvisibleDuration(
        self, request: rpc.ChangeInvisibleDurationRequest, context: Any
    ) -> Any:
        if (refusal := self._refusal("ChangeInvisibleDuration", request, context)) is not None:
            return rpc.ChangeInvisibleDurationResponse(status=refusal)
        return await self.consume.change_invisible_duration(request, context)

    async def ForwardMessageToDeadLetterQueue(
        self, request: rpc.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> Any:
        method = "ForwardMessageToDeadLetterQueue"
        if (refusal := self._refusal(method, request, context)) is not None:
            return rpc.ForwardMessageToDeadLetterQueueResponse(status=refusal)
        return await self.consume.forward_to_dead_letter_queue(request, context)

    async def QueryAssignment(self, request: rpc.QueryAssignmentRequest, context: Any) -> Any:
        if (refusal := self._refusal("QueryAssignment", request, context)) is not None:
            return rpc.QueryAssignmentResponse(status=refusal)
        route = await self._query_route(
            rpc.QueryRouteRequest(topic=request.topic, endpoints=request.endpoints), context
        )
        return self.consume.query_assignment(request, route)

    # -- pull consumption: broker/grpc/pull.py ------------------------------------------------
    async def PullMessage(
        self, request: rpc.PullMessageRequest, context: Any
    ) -> AsyncIterator[rpc.PullMessageResponse]:
        if (refusal := self._refusal("PullMessage", request, context)) is not None:
            yield rpc.PullMessageResponse(status=refusal)
            return
        async for response in self.pulls.pull(request, context):
            yield response

    async def UpdateOffset(self, request: rpc.UpdateOffsetRequest, context: Any) -> Any:
        if (refusal := self._refusal("UpdateOffset", request, context)) is not None:
            return rpc.UpdateOffsetResponse(status=refusal)
        return await self.pulls.update_offset(request)

    async def GetOffset(self, request: rpc.GetOffsetRequest, context: Any) -> Any:
        if (refusal := self._refusal("GetOffset", request, context)) is not None:
            return rpc.GetOffsetResponse(status=refusal)
        return await self.pulls.get_offset(request)

    async def QueryOffset(self, request: rpc.QueryOffsetRequest, context: Any) -> Any:
        if (refusal := self._refusal("QueryOffset", request, context)) is not None:
            return rpc.QueryOffsetResponse(status=refusal)
        return await self.pulls.query_offset(request)

    async def Telemetry(
        self, request_iterator: AsyncIterator[rpc.TelemetryCommand], context: Any
    ) -> AsyncIterator[rpc.TelemetryCommand]:
        """The stream's opening is admitted (any known user), then each Settings the client
        writes on it (:func:`broker.grpc.permissions.settings_checks`)."""
        try:
            user = self._admit("Telemetry", None, context)
        except Refused as exc:
            yield rpc.TelemetryCommand(status=_status(exc.code, exc.message))
            return
        guard = self.guard
        check = None
        if guard is not None and user is not None:

            def check(settings: pb.Settings, user: User = user) -> None:
                guard.admit_settings(context, user, settings)

        async for command in self.telemetry.stream(request_iterator, context, check):
            yield command


class GrpcEndpoint:
    """The asyncio gRPC server of one broker."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        self.server: Any = None
        self.port = 0
        self.tls_port = 0
        #: the TLS port's certificate (None: no TLS port)
        self.certificate: ServerCertificate | None = None

    async def start(
        self,
        plain: tuple[str, int] | None,
        tls: tuple[str, int, Path, Path] | None = None,
    ) -> None:
        """Serve plaintext on ``plain`` (host, port; None: not) and TLS on ``tls`` (host, port,
        certificate chain file, private key file; None: not); :attr:`port` and
        :attr:`tls_port` are the ports bound. Raises :class:`RuntimeError` when a port cannot
        be bound, :class:`remoting.tls.TlsError` when the certificate or key cannot be used."""
        limit = self.service.max_body_bytes + _REQUEST_OVERHEAD
        server = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
            ]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)  # type: ignore[no-untyped-call]
        if plain is not None:
            self.port = server.add_insecure_port(f"{plain[0]}:{plain[1]}")
        if tls is not None:
            host, port, cert, key = tls
            self.certificate = ServerCertificate(cert, key)
            self.tls_port = server.add_secure_port(f"{host}:{port}", self.certificate.credentials())
        await server.start()
        self.server = server
        book = self.service.endpoints
        book.set_own(
            (plain[0], self.port) if plain is not None else None,
            (tls[0], self.tls_port) if tls is not None else None,
        )
        self.service.telemetry.start()

    async def stop(self) -> None:
        await self.service.telemetry.stop()
        if self.server is not None:
            await self.server.stop(1.0)
            self.server = None
        self.service.close()
