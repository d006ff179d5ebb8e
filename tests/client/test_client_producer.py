"""Producer against in-memory fake broker groups: round-robin, retries, errors, batches."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from client.errors import BrokerError, SendError, TopicNotFoundError
from client.message import Message, SendResult
from client.producer import Producer
from protocol.codes import RequestCode, ResponseCode
from protocol.message import MessageRecord, iter_records
from tests.client.fakebroker import FakeCluster


@pytest.fixture
async def producer(cluster: FakeCluster) -> AsyncIterator[Producer]:
    p = Producer(cluster.brokers["broker-a"].address, send_timeout=2, connect_timeout=2)
    await p.start()
    yield p
    await p.close()


def sends(cluster: FakeCluster, name: str) -> int:
    return cluster.brokers[name].requests.count(RequestCode.SEND_MESSAGE)


async def test_sends_go_round_robin_over_every_broker_queue_pair(
    cluster: FakeCluster, producer: Producer
) -> None:
    results = [await producer.send("T", f"m{i}".encode()) for i in range(16)]
    pairs = Counter((r.broker_name, r.queue_id) for r in results)
    assert pairs == Counter({(b, q): 2 for b in ("broker-a", "broker-b") for q in range(4)})
    assert all(r.msg_id for r in results)


async def test_stored_record_carries_body_keys_tags_and_properties(
    cluster: FakeCluster, producer: Producer
) -> None:
    r = await producer.send("T", b"hello", keys="k1", tags="tA", properties={"p": "v"})
    raw = cluster.brokers[r.broker_name].queues[("T", r.queue_id)][r.queue_offset]
    (rec,) = iter_records(raw)
    assert (rec.body, rec.keys, rec.tags, rec.properties["p"]) == (b"hello", "k1", "tA", "v")
    assert rec.msg_id == r.msg_id
    assert rec.born_timestamp > 0


async def test_a_retriable_error_is_retried_on_the_other_broker_group(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")  # goes to broker-a queue 0; the next goes to a/1
    cluster.brokers["broker-a"].send_errors = [ResponseCode.SYSTEM_BUSY]
    result = await producer.send("T", b"x")
    assert result.broker_name == "broker-b"
    assert cluster.brokers["broker-b"].stored("T") == 1


@pytest.mark.parametrize(
    "code",
    [
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.DISK_FULL,
        ResponseCode.NOT_MASTER,
        ResponseCode.MASTER_FENCED,
        ResponseCode.TOO_MANY_IN_FLIGHT,
    ],
)
async def test_every_retriable_code_is_retried(
    cluster: FakeCluster, producer: Producer, code: int
) -> None:
    for b in cluster.brokers.values():
        b.send_errors = [code]
    result = await producer.send("T", b"x")  # one failure per group, then success
    assert cluster.brokers[result.broker_name].stored("T") == 1


async def test_send_fails_after_the_configured_retries(cluster: FakeCluster) -> None:
    for b in cluster.brokers.values():
        b.send_errors = [ResponseCode.SYSTEM_BUSY] * 10
    async with Producer(cluster.brokers["broker-a"].address, retries=3) as p:
        with pytest.raises(SendError) as err:
            await p.send("T", b"x")
    assert isinstance(err.value.__cause__, BrokerError)
    assert sends(cluster, "broker-a") + sends(cluster, "broker-b") == 4
    assert sum(b.stored("T") for b in cluster.brokers.values()) == 0


async def test_topic_not_exist_is_not_retried(cluster: FakeCluster, producer: Producer) -> None:
    await producer.routes.get("T")
    for b in cluster.brokers.values():
        del b.topics["T"]  # the route is cached, the brokers no longer know the topic
    with pytest.raises(TopicNotFoundError):
        await producer.send("T", b"x")
    assert sends(cluster, "broker-a") + sends(cluster, "broker-b") == 1


async def test_a_non_retriable_refusal_is_raised_at_once(
    cluster: FakeCluster, producer: Producer
) -> None:
    cluster.brokers["broker-a"].send_errors = [ResponseCode.MESSAGE_ILLEGAL]
    with pytest.raises(BrokerError) as err:
        await producer.send("T", b"x")
    assert err.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert sends(cluster, "broker-b") == 0


async def test_a_dead_broker_group_is_skipped_after_a_connection_error(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")
    await cluster.brokers["broker-b"].stop()  # route still lists it until refreshed
    results = [await producer.send("T", f"{i}".encode()) for i in range(8)]
    assert {r.broker_name for r in results} == {"broker-a"}


async def test_many_concurrent_sends_share_one_connection_per_broker(
    cluster: FakeCluster,
) -> None:
    # Without auto-batching, so that 500 requests are spread over both groups.
    async with Producer(cluster.brokers["broker-a"].address, auto_batch=False) as producer:
        results = await asyncio.gather(*(producer.send("T", b"%d" % i) for i in range(500)))
        assert len({(r.broker_name, r.queue_id, r.queue_offset) for r in results}) == 500
        for b in cluster.brokers.values():
            # broker-a also served the route request, over the same pooled connection
            assert len(b.server.connections) == 1


def stored_record(cluster: FakeCluster, r: SendResult) -> MessageRecord:
    (rec,) = iter_records(cluster.brokers[r.broker_name].queues[("T", r.queue_id)][r.queue_offset])
    return rec


async def test_concurrent_sends_are_gathered_into_batches_each_with_its_own_result(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")
    results = await asyncio.gather(
        *(producer.send("T", b"m%d" % i, keys=f"k{i}", tags="t") for i in range(300))
    )
    batches = sum(
        b.requests.count(RequestCode.SEND_BATCH_MESSAGE) for b in cluster.brokers.values()
    )
    assert 1 <= batches < 300
    assert len({r.msg_id for r in results}) == 300
    for i, r in enumerate(results):  # each send's result is where its own message is
        rec = stored_record(cluster, r)
        assert (rec.body, rec.keys, rec.tags, rec.msg_id) == (b"m%d" % i, f"k{i}", "t", r.msg_id)
    assert sum(b.stored("T") for b in cluster.brokers.values()) == 301


async def test_a_batch_failing_retriably_is_retried_as_a_batch_elsewhere(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")
    for b in cluster.brokers.values():
        b.batch_errors = [ResponseCode.SYSTEM_BUSY]
    results = await asyncio.gather(*(producer.send("T", b"m%d" % i) for i in range(40)))
    assert all(not b.batch_errors for b in cluster.brokers.values())  # both refused one batch
    assert [stored_record(cluster, r).body for r in results] == [b"m%d" % i for i in range(40)]
    assert sum(b.stored("T") for b in cluster.brokers.values()) == 41  # nothing twice


async def test_a_batch_refused_for_good_is_sent_again_message_by_message(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")
    for b in cluster.brokers.values():
        b.batch_errors = [ResponseCode.MESSAGE_ILLEGAL] * 100
    results = await asyncio.gather(*(producer.send("T", b"m%d" % i) for i in range(40)))
    assert [stored_record(cluster, r).body for r in results] == [b"m%d" % i for i in range(40)]
    assert sends(cluster, "broker-a") + sends(cluster, "broker-b") == 41  # each one alone


async def test_a_topic_refused_fails_every_gathered_send(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")
    for b in cluster.brokers.values():
        del b.topics["T"]
    outcomes = await asyncio.gather(
        *(producer.send("T", b"m%d" % i) for i in range(20)), return_exceptions=True
    )
    assert all(isinstance(o, TopicNotFoundError) for o in outcomes)


async def test_a_cancelled_gathered_send_is_dropped_and_the_others_go(
    cluster: FakeCluster, producer: Producer
) -> None:
    await producer.send("T", b"warm-up")
    first = asyncio.ensure_future(producer.send("T", b"first"))  # in flight alone
    await asyncio.sleep(0)
    gathered = [asyncio.ensure_future(producer.send("T", b"g%d" % i)) for i in range(5)]
    await asyncio.sleep(0)
    gathered[2].cancel()
    await first
    done = await asyncio.gather(*gathered, return_exceptions=True)
    assert isinstance(done[2], asyncio.CancelledError)
    kept = [d for i, d in enumerate(done) if i != 2]
    assert [stored_record(cluster, r).body for r in kept] == [b"g0", b"g1", b"g3", b"g4"]  # type: ignore[arg-type]
    assert sum(b.stored("T") for b in cluster.brokers.values()) == 6


async def test_a_batch_lands_in_one_queue_at_consecutive_offsets(
    cluster: FakeCluster, producer: Producer
) -> None:
    msgs = [Message(body=f"b{i}".encode(), keys=f"k{i}") for i in range(5)]
    results = await producer.send_batch("T", msgs)
    assert len({(r.broker_name, r.queue_id) for r in results}) == 1
    assert [r.queue_offset for r in results] == list(range(5))
    assert (
        cluster.brokers[results[0].broker_name].requests.count(RequestCode.SEND_BATCH_MESSAGE) == 1
    )
    assert await producer.send_batch("T", []) == []


async def test_sending_to_an_unknown_topic_raises_topic_not_found(producer: Producer) -> None:
    with pytest.raises(TopicNotFoundError):
        await producer.send("nope", b"x")


async def test_a_failed_group_is_isolated_so_later_sends_skip_it(cluster: FakeCluster) -> None:
    async with Producer(cluster.brokers["broker-a"].address, fault_isolation=30) as p:
        await p.send("T", b"warm-up")
        p._router.rr["T"] = 4  # the next pick is broker-b queue 0
        cluster.brokers["broker-b"].send_errors = [ResponseCode.SYSTEM_BUSY]
        results = [await p.send("T", b"%d" % i) for i in range(12)]
    assert {r.broker_name for r in results} == {"broker-a"}
    assert sends(cluster, "broker-b") == 1


async def test_without_isolation_the_failed_group_gets_its_turn_again(cluster: FakeCluster) -> None:
    async with Producer(cluster.brokers["broker-a"].address, fault_isolation=0) as p:
        p._router.rr["T"] = 4
        await p.routes.get("T")
        cluster.brokers["broker-b"].send_errors = [ResponseCode.SYSTEM_BUSY]
        results = [await p.send("T", b"%d" % i) for i in range(12)]
    assert {r.broker_name for r in results} == {"broker-a", "broker-b"}


async def test_linger_gathers_sends_made_while_nothing_is_in_flight(cluster: FakeCluster) -> None:
    async with Producer(cluster.brokers["broker-a"].address, linger_ms=50) as p:
        await p.routes.get("T")
        # Round-robin: four to each group, each four one batch (a batch of one would go as a
        # plain SEND_MESSAGE).
        results = await asyncio.gather(*(p.send("T", b"m%d" % i) for i in range(8)))
    for b in cluster.brokers.values():
        assert b.requests.count(RequestCode.SEND_BATCH_MESSAGE) == 1
    assert sends(cluster, "broker-a") + sends(cluster, "broker-b") == 0  # none went alone
    assert [stored_record(cluster, r).body for r in results] == [b"m%d" % i for i in range(8)]


async def test_a_full_batch_leaves_at_once_and_none_exceeds_the_count(cluster: FakeCluster) -> None:
    async with Producer(cluster.brokers["broker-a"].address, batch_max_count=4) as p:
        await p.send("T", b"warm-up")
        results = await asyncio.gather(*(p.send("T", b"m%d" % i) for i in range(40)))
    per_queue = Counter((r.broker_name, r.queue_id) for r in results)
    batches = sum(
        b.requests.count(RequestCode.SEND_BATCH_MESSAGE) for b in cluster.brokers.values()
    )
    assert batches >= (40 - 2) // 4  # at most two went alone
    assert sum(per_queue.values()) == 40
    assert [stored_record(cluster, r).body for r in results] == [b"m%d" % i for i in range(40)]


async def test_gathered_sends_fail_when_their_deadline_passes(cluster: FakeCluster) -> None:
    async with Producer(cluster.brokers["broker-a"].address, send_deadline=0.5) as p:
        await p.send("T", b"warm-up")
        for b in cluster.brokers.values():
            b.batch_errors = [ResponseCode.SYSTEM_BUSY] * 10_000
            b.send_errors = [ResponseCode.SYSTEM_BUSY] * 10_000
        outcomes = await asyncio.gather(
            *(p.send("T", b"m%d" % i) for i in range(20)), return_exceptions=True
        )
    assert all(isinstance(o, SendError) for o in outcomes), outcomes
    assert sum(b.stored("T") for b in cluster.brokers.values()) == 1  # the warm-up only
