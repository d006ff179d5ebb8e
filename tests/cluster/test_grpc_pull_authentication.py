"""The pull consumer's RPCs with the broker's authentication on: held to the user's rules as the
remoting requests they become (sub on the topic and the group; QueryOffset sub on the topic), a
refused commit changing nothing. The module's own cluster, as test_grpc_authentication's."""

from __future__ import annotations

import grpc
import pytest

from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub
from tests.cluster.test_grpc_authentication import APP, FULL, SecuredGrpc, signed
from tests.cluster.test_grpc_authentication import secured as secured  # the module's cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

QUEUE = pb.MessageQueue(topic=pb.Resource(name="A"), id=0)
GROUP = pb.Resource(name="g")


async def _pull(stub: MessagingServiceStub, metadata: object) -> list[rpc.PullMessageResponse]:
    request = rpc.PullMessageRequest(group=GROUP, message_queue=QUEUE, offset=0, batch_size=8)
    return [r async for r in stub.PullMessage(request, metadata=metadata, timeout=10)]


async def test_pulls_and_offsets_need_sub_on_the_topic_and_the_group(
    secured: SecuredGrpc,
) -> None:
    async with grpc.aio.insecure_channel(secured.endpoint) as channel:
        stub = MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
        query = rpc.QueryOffsetRequest(message_queue=QUEUE, query_offset_policy=pb.END)
        end = await stub.QueryOffset(query, metadata=signed(FULL), timeout=10)
        assert end.status.code == pb.OK, end
        commit = rpc.UpdateOffsetRequest(group=GROUP, message_queue=QUEUE, offset=end.offset)

        async def committed() -> bool:
            # HA_NOT_AVAILABLE until the broker has heard from the controllers that it is the
            # master (the route names it a little earlier): the client commits again.
            updated = await stub.UpdateOffset(commit, metadata=signed(FULL), timeout=10)
            assert updated.status.code in (pb.OK, pb.HA_NOT_AVAILABLE), updated
            return bool(updated.status.code == pb.OK)

        await wait_until_async(committed, "a commit the broker takes as master", 30)
        pulled = await _pull(stub, signed(FULL))
        assert pulled[0].status.code in (pb.OK, pb.MESSAGE_NOT_FOUND), pulled
        assert pulled[-1].WhichOneof("content") == "next_offset", pulled

        # APP may publish to A, nothing more.
        (refused,) = await _pull(stub, signed(APP))
        assert refused.status.code == pb.FORBIDDEN, refused
        assert "sub on Topic:A" in refused.status.message, refused
        denied = await stub.QueryOffset(query, metadata=signed(APP), timeout=10)
        assert denied.status.code == pb.FORBIDDEN and "Topic:A" in denied.status.message
        forged = rpc.UpdateOffsetRequest(group=GROUP, message_queue=QUEUE, offset=end.offset + 7)
        denied_commit = await stub.UpdateOffset(forged, metadata=signed(APP), timeout=10)
        assert denied_commit.status.code == pb.FORBIDDEN, denied_commit
        get = rpc.GetOffsetRequest(group=GROUP, message_queue=QUEUE)
        denied_get = await stub.GetOffset(get, metadata=signed(APP), timeout=10)
        assert denied_get.status.code == pb.FORBIDDEN, denied_get
        unsigned = await stub.GetOffset(get, timeout=10)
        assert unsigned.status.code == pb.UNAUTHORIZED, unsigned

        kept = await stub.GetOffset(get, metadata=signed(FULL), timeout=10)
        assert (kept.status.code, kept.offset) == (pb.OK, end.offset), kept
