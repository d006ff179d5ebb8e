"""The rmq source's planning and reading against a real broker, without a Spark session: the
stream reader is plain Python, so its offsets, limits, replays and failure handling are checked
directly (the Spark tests then check the wiring)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from structlog.testing import capture_logs

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pipeline.batch_reader import RmqBatchReader
from pipeline.errors import DataLossError, PipelineError, UnknownTopicError
from pipeline.loop import SyncLoop
from pipeline.options import ReadOptions
from pipeline.partition import RangePartition
from pipeline.range_reader import PullSettings, QueueRange, read_range
from pipeline.rows import message_schema
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer, error_response
from tests.pipeline.conftest import fill, produce, small_retention_config, stream_reader
from tests.storage.test_store_corruption import flip, records_on_disk
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def rows(reader: Any, parts: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        for batch in reader.read(part):
            out.extend(batch.to_pylist())
    return out


def test_ranges_are_read_exactly_with_short_and_pipelined_pulls(shared_broker: BrokerProc) -> None:
    results = fill(shared_broker.address, "RangeT", 1, 300, body_size=2000)
    assert {r.queue_id for r in results} == {0}
    qr = QueueRange(shared_broker.address, "RangeT", "broker-a", 0, 17, 283)
    # pullMaxBytes of ~5 records: every pull ends short of the 64 asked for; the pulls asked for
    # ahead are dropped and the next start where the short one ended.
    settings = PullSettings(batch_size=64, max_bytes=10_500, read_timeout=20)
    seen = [(chunk.first, chunk.records) for chunk in read_range(qr, settings)]
    offsets = [o for first, n in seen for o in range(first, first + n)]
    assert offsets == list(range(17, 283))
    assert max(n for _, n in seen) < 64
    # Default settings: full pulls, three in flight.
    opts = ReadOptions.parse(
        {"controllers": shared_broker.address, "topic": "RangeT", "pullBatchSize": "50"}
    )
    reader = RmqBatchReader(opts, message_schema())
    got = rows(reader, [RangePartition(qr)])
    assert [r["queueOffset"] for r in got] == list(range(17, 283))
    first = got[0]
    assert first["body"].startswith(b"m17.") and len(first["body"]) == 2000
    assert (first["keys"], first["tags"], first["properties"]) == ("k17", "odd", [("i", "17")])
    assert first["msgId"] == results[17].msg_id and first["brokerName"] == "broker-a"


def test_stream_offsets_limits_replay_new_queues_and_available_now(
    shared_broker: BrokerProc,
) -> None:
    address = shared_broker.address
    fill(address, "StreamT", 2, 40)
    reader = stream_reader(address, "StreamT", startingOffsets="earliest")
    start = reader.initialOffset()
    assert start == {"broker-a": {"0": 0, "1": 0}}
    # Spark 4.2+ passes start and a ReadLimit; the default limit comes from the option.
    limited = stream_reader(address, "StreamT", maxOffsetsPerTrigger="25")
    limit = limited.getDefaultReadLimit()
    end = limited.latestOffset(start, limit)
    assert sum(end["broker-a"].values()) == 25
    # Spark before 4.2 calls latestOffset() bare: the option applies from the offsets the
    # reader returned last.
    old = stream_reader(address, "StreamT", maxOffsetsPerTrigger="25", startingOffsets="earliest")
    old.initialOffset()
    assert sum(old.latestOffset()["broker-a"].values()) == 25
    assert old.latestOffset() == {"broker-a": {"0": 20, "1": 20}}
    # A replayed batch (same start and end) yields exactly the same messages.
    parts = reader.partitions(start, end)
    assert len(parts) == 2
    once, again = rows(reader, parts), rows(reader, reader.partitions(start, end))
    assert [r["msgId"] for r in once] == [r["msgId"] for r in again] and len(once) == 25
    assert reader.partitions(end, end) == []
    # All available: up to the committed ends.
    full = reader.latestOffset(end, None)
    assert full == {"broker-a": {"0": 20, "1": 20}}
    assert reader.latestOffset(full, None) == full  # nothing new: the same offsets

    # The topic grows to 4 queues: the new ones join at their earliest offset with an empty
    # range (the next batch reads them).
    asyncio.run(_grow(address, "StreamT", 4))
    grown = reader.latestOffset(full, None)
    assert grown == {"broker-a": {"0": 20, "1": 20, "2": 0, "3": 0}}
    assert reader.partitions(full, grown) == []
    asyncio.run(produce(address, "StreamT", 8, start=40))
    after = reader.latestOffset(grown, None)
    assert sum(after["broker-a"].values()) == 48
    assert {r["queueId"] for r in rows(reader, reader.partitions(grown, after))} == {0, 1, 2, 3}

    # Trigger.AvailableNow: the target is fixed when the query starts.
    now = stream_reader(address, "StreamT", maxOffsetsPerTrigger="5")
    now.prepareForTriggerAvailableNow()
    asyncio.run(produce(address, "StreamT", 8, start=48))
    offsets, batches = grown, 0
    while True:
        nxt = now.latestOffset(offsets, now.getDefaultReadLimit())
        if nxt == offsets:
            break
        batches += 1
        offsets = nxt
    assert offsets == after and batches == 2  # 8 messages, 5 per batch; later ones not read
    assert now.reportLatestOffset() is not None


async def _grow(address: str, topic: str, queues: int) -> None:
    from tests.pipeline.conftest import create_topic

    await create_topic(address, topic, queues)


def test_unknown_topic_and_unreachable_controllers_are_clear(shared_broker: BrokerProc) -> None:
    with pytest.raises(UnknownTopicError, match="topic 'NoSuchTopic' does not exist"):
        stream_reader(shared_broker.address, "NoSuchTopic").initialOffset()
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(PipelineError, match=f"controllers unreachable: cannot reach any of {dead}"):
        stream_reader(dead, "T").initialOffset()


def test_data_loss_fails_or_is_skipped(broker_factory: type[BrokerProc], tmp_path: Path) -> None:
    cfg = small_retention_config(tmp_path / "cfg")
    broker = broker_factory(tmp_path, extra=["--config", str(cfg)]).start_and_wait()
    fill(broker.address, "LossT", 1, 120, body_size=2048)  # ~4 segments of 64 KiB
    opts = {"controllers": broker.address, "topic": "LossT"}

    def low() -> int:
        reader = RmqBatchReader(ReadOptions.parse(opts), message_schema())
        (part,) = reader.partitions()
        assert isinstance(part, RangePartition)
        return part.qr.start

    wait_until(lambda: low() > 0, "retention to delete the oldest segments", 20)
    earliest = low()
    # Asking for offsets below the earliest retained one: data loss.
    start = '{"broker-a": {"0": 0}}'
    strict = RmqBatchReader(ReadOptions.parse({**opts, "startingOffsets": start}), message_schema())
    with pytest.raises(DataLossError, match=r"LossT@broker-a/0 .*messages \[0, \d+\) are gone"):
        rows(strict, strict.partitions())
    lenient = RmqBatchReader(
        ReadOptions.parse({**opts, "startingOffsets": start, "failOnDataLoss": "false"}),
        message_schema(),
    )
    got = [r["queueOffset"] for r in rows(lenient, lenient.partitions())]
    assert got[0] >= earliest and got == list(range(got[0], 120))


def test_an_unreadable_message_fails_the_read_or_is_skipped(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    """A broker answers MESSAGE_CORRUPT for a record that fails its CRC: data loss, named."""
    broker = broker_factory(tmp_path, segment_bytes=64 * 1024).start_and_wait()
    fill(broker.address, "CorruptT", 1, 120, body_size=2000)  # ~4 segments of 64 KiB
    assert broker.stop() == 0
    bad = records_on_disk(broker.data_dir)[10]
    assert bad.path.name == f"{0:020d}"  # not the last segment: nothing after it is truncated
    flip(bad, 200)  # in the body: the CRC no longer matches
    broker.start_and_wait()
    qr = QueueRange(broker.address, "CorruptT", "broker-a", 0, 0, 120)

    with pytest.raises(DataLossError) as failed:
        list(read_range(qr, PullSettings(batch_size=32, read_timeout=20)))
    message = str(failed.value)
    assert message.startswith(f"CorruptT@broker-a/0 [0, 120): broker broker-a at {broker.address}")
    assert (
        f"queue CorruptT:0, offset 10 cannot be read (commitlog offset {bad.physical})" in message
    )
    assert message.endswith("set failOnDataLoss=false to skip lost messages")

    lenient = PullSettings(batch_size=32, read_timeout=20, fail_on_data_loss=False)
    with capture_logs() as logs:
        offsets = [o for c in read_range(qr, lenient) for o in range(c.first, c.first + c.records)]
    assert offsets == [i for i in range(120) if i != 10]
    (warning,) = [e for e in logs if e["event"] == "message unreadable, skipping"]
    assert (warning["log_level"], warning["start"], warning["end"]) == ("warning", 10, 11)
    assert f"commitlog offset {bad.physical}" in warning["reason"]


class RouteServer:
    """A stand-in for the controllers that serves one route (to steer readers to replicas)."""

    def __init__(self, route: dict[str, Any]) -> None:
        self.route = route
        self.loop = SyncLoop()
        self.server = RemotingServer(name="routes")
        self.server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        self.port = self.loop.run(self.server.start("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.port}"

    def _route(self, conn: Connection, req: Frame) -> Frame:
        if req.header.get("topic") != self.route["topic"]:
            return error_response(req, ResponseCode.TOPIC_NOT_EXIST, "no route")
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(self.route))

    def close(self) -> None:
        self.loop.run(self.server.stop())
        self.loop.close()


@pytest.fixture
def route_server(shared_broker: BrokerProc) -> Iterator[Any]:
    servers: list[RouteServer] = []

    def make(master: str | None, slaves: list[str]) -> RouteServer:
        route = {
            "topic": "ReplicaT",
            "brokers": [
                {"brokerName": "broker-a", "masterAddress": master, "slaves": slaves, "queues": 1}
            ],
        }
        servers.append(RouteServer(route))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_reads_fall_back_to_a_slave_while_the_group_has_no_master(
    shared_broker: BrokerProc, route_server: Any
) -> None:
    fill(shared_broker.address, "ReplicaT", 1, 30)
    dead = f"127.0.0.1:{free_port()}"
    # The group has no master (nil in the route); its slave is our broker: planning and reading
    # both go to it. Then a master that is down: reads move on to the slave.
    for master in (None, dead):
        routes = route_server(master, [shared_broker.address])
        reader = RmqBatchReader(
            ReadOptions.parse({"controllers": routes.address, "topic": "ReplicaT"}),
            message_schema(),
        )
        if master is None:
            parts = reader.partitions()
        else:
            parts = [RangePartition(QueueRange(routes.address, "ReplicaT", "broker-a", 0, 0, 30))]
        assert [r["queueOffset"] for r in rows(reader, parts)] == list(range(30))
