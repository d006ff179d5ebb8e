"""A consumer closed as its group changes ends its rebalancer: the cancellation is never lost.

``Consumer.close`` cancels the group rebalancer's loop and waits for it. The loop waits for its
next heartbeat, or for a broker's NOTIFY_CONSUMER_IDS_CHANGED (another member came or left). It
waited with ``asyncio.wait_for``, which on Python 3.11 returns the wake-up when the cancel lands
in the loop turns in which the notice arrived and loses the cancel: the loop went on heartbeating
and close() did not return (every member of a group closing at once is notified of the others
leaving). It waits with ``asyncio.timeout`` now. A real consumer and fake broker groups on
loopback; the broker pushes the notice and the close comes 0 to 29 loop turns later.
"""

from __future__ import annotations

from client.consumer import Consumer
from protocol.codes import RequestCode
from protocol.remoting import Frame, request
from remoting.server import Connection
from tests.client.fakebroker import FakeCluster
from tests.support.cancel_race import Stop, stops_that_hung


async def test_a_close_as_the_group_changes_ends_the_rebalancer(cluster: FakeCluster) -> None:
    broker = cluster.brokers["broker-a"]
    members: list[Connection] = []

    def heartbeat(conn: Connection, req: Frame) -> Frame:
        members.append(conn)
        return broker.heartbeat(conn, req)

    broker.server.register(RequestCode.HEART_BEAT, heartbeat)
    notice = request(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 0, {"consumerGroup": "G"}, oneway=True
    )

    async def wake() -> Stop:
        members.clear()
        consumer = Consumer(broker.address, "G", "T", heartbeat_interval=60)
        await consumer.start()  # its first heartbeat is answered before start returns
        members[-1].send(notice)
        return consumer.close

    hung = await stops_that_hung(wake, turns=30, rounds=2)
    assert not hung, f"close() did not end the rebalancer when it came after these turns: {hung}"
