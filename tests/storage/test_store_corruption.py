"""Corrupt store files of a stopped broker, then a restart of the real process: no intact
acknowledged message is lost, and what cannot be read is reported (log line, metric, a consumer
error naming the offset, ``rmqctl consumeMessage`` exit 1 with one line)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from client.consumer import Consumer
from client.errors import CorruptMessageError
from client.producer import Producer
from protocol.broker_requests.repair import SkipCorruptMessage
from protocol.codes import RequestCode, ResponseCode
from protocol.message import MESSAGE_MAGIC, decode_record, iter_records, peek_prefix
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from storage.checkpoint import Checkpoint, load_checkpoint
from storage.consumequeue import ENTRY
from tests.support.procs import ROOT, BrokerProc, free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

SEGMENT = 64 * 1024  # the smallest the broker accepts: 200 messages fill four segments
TOPIC = "Damaged"
COUNT = 200
NAME = "broker-a"
NO_CHECKPOINT = Checkpoint(flushed_offset=0, dispatched_offset=0, confirm_offset=0, timestamp_ms=0)


def body(i: int) -> bytes:
    return f"m{i}:".encode() + bytes([65 + i % 26]) * 1000


@dataclass(frozen=True)
class OnDisk:
    path: Path
    pos: int
    """Position in the segment file."""
    physical: int
    size: int


def records_on_disk(data_dir: Path) -> dict[int, OnDisk]:
    """Queue offset -> where its record lies, read from the segment files."""
    found: dict[int, OnDisk] = {}
    for path in sorted((data_dir / "commitlog").iterdir()):
        raw = path.read_bytes()
        pos = 0
        while pos + 8 <= len(raw):
            size, magic = peek_prefix(raw, pos)
            if magic != MESSAGE_MAGIC:
                break
            record = decode_record(raw, pos)
            found[record.queue_offset] = OnDisk(path, pos, record.physical_offset, size)
            pos += size
    return found


def new_broker(factory: type[BrokerProc], tmp_path: Path, metrics_port: int) -> BrokerProc:
    # Without the background scrub (issue 31): these tests check what a read reports when it
    # meets the damage, and the scrub would find it first (tests/broker/test_lone_scrub.py).
    proc = factory(tmp_path, name=NAME, segment_bytes=SEGMENT, extra_toml="scrub_bytes_per_s = 0\n")
    proc.argv[proc.argv.index("--metrics-port") + 1] = str(metrics_port)
    return proc


async def produce(address: str) -> None:
    conn = await RemotingClient.connect(address)
    try:
        resp = await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 1})
        assert resp.code == ResponseCode.SUCCESS
    finally:
        conn.close()
    async with Producer(address) as producer:
        for i in range(COUNT):
            result = await producer.send(TOPIC, body(i))
            assert result.queue_offset == i


async def pull(address: str, offset: int) -> tuple[int, dict[str, object], list[int]]:
    """One pull at ``offset``: (code, header, queue offsets of the records served)."""
    conn = await RemotingClient.connect(address)
    try:
        header = {"consumerGroup": "check", "topic": TOPIC, "queueId": 0, "queueOffset": offset}
        resp = await conn.request(RequestCode.PULL_MESSAGE, header, timeout=10)
    finally:
        conn.close()
    records = list(iter_records(resp.body or b""))
    for r in records:
        assert r.body == body(r.queue_offset)
    return resp.code, dict(resp.header), [r.queue_offset for r in records]


async def readable(address: str, start: int, stop: int) -> list[int]:
    """Queue offsets in [start, stop) served intact, pulling past each one that fails."""
    offsets: list[int] = []
    offset = start
    while offset < stop:
        code, _header, got = await pull(address, offset)
        if code == ResponseCode.SUCCESS:
            offsets += got
            offset = got[-1] + 1
        else:
            assert code == ResponseCode.MESSAGE_CORRUPT, code
            offset += 1
    return offsets


async def consume(address: str, group: str, timeout: float) -> tuple[list[int], Exception | None]:
    """Consume until an error or ``timeout``: (queue offsets received, the error)."""
    got: list[int] = []
    async with Consumer(address, group, TOPIC, suspend_ms=200) as consumer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(got) < COUNT:
            try:
                msgs = await consumer.receive(0.5)
            except CorruptMessageError as exc:
                return got, exc
            got += [m.queue_offset for m in msgs]
    return got, None


def rmqctl_consume(address: str, group: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "rmqctl", "consumeMessage", "-a", address]
    argv += ["-t", TOPIC, "-g", group, "--timeout", "8"]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)


def corrupt_count(metrics_port: int, kind: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("rmq_broker_corrupt_data_total{") and f'kind="{kind}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no rmq_broker_corrupt_data_total for {kind}:\n{text[-2000:]}")


def flip(rec: OnDisk, at: int) -> None:
    with rec.path.open("r+b") as f:
        f.seek(rec.pos + at)
        byte = f.read(1)
        f.seek(rec.pos + at)
        f.write(bytes([byte[0] ^ 0x5A]))


@pytest.fixture
def metrics_port() -> int:
    return free_port()


async def filled_then_stopped(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int, *, kill: bool
) -> tuple[BrokerProc, dict[int, OnDisk]]:
    broker = new_broker(broker_factory, tmp_path, metrics_port)
    broker.start_and_wait()
    await produce(broker.address)
    if kill:
        # Once the checkpoint covers the first segment (flushed: damage there is corruption,
        # not a torn write), a crash.
        checkpoint = broker.data_dir / "checkpoint"
        wait_until(
            lambda: (load_checkpoint(checkpoint) or NO_CHECKPOINT).flushed_offset >= SEGMENT,
            "the checkpoint to cover the first segment",
            10,
        )
        broker.kill9()
    else:
        assert broker.stop() == 0
    on_disk = records_on_disk(broker.data_dir)
    assert sorted(on_disk) == list(range(COUNT))
    assert len({r.path for r in on_disk.values()}) >= 3
    return broker, on_disk


def logged(broker: BrokerProc, since: int, *lines: str) -> str:
    """The broker's log past ``since`` once it holds every one of ``lines``. A daemon writes its
    log from a thread of its own (daemon/logs.py), so a line can reach the file after the answer
    the broker sent once it had logged it."""
    wait_until(
        lambda: all(line in broker.log()[since:] for line in lines), f"the log lines {lines}", 10
    )
    return broker.log()[since:]


@pytest.mark.parametrize("kill", [False, True], ids=["clean-stop", "kill-9"])
async def test_flipped_byte_in_a_segment_that_is_not_the_last(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int, kill: bool
) -> None:
    broker, on_disk = await filled_then_stopped(broker_factory, tmp_path, metrics_port, kill=kill)
    bad = on_disk[10]
    assert bad.path.name == f"{0:020d}" and len(list((broker.data_dir / "commitlog").iterdir())) > 1
    flip(bad, 200)  # in the body: the CRC no longer matches
    since = len(broker.log())
    broker.start_and_wait()

    # Every other message is intact and served.
    code, header, _ = await pull(broker.address, 10)
    assert code == ResponseCode.MESSAGE_CORRUPT
    assert header["physicalOffset"] == bad.physical
    assert await readable(broker.address, 0, COUNT) == [i for i in range(COUNT) if i != 10]

    # A consumer gets the error naming the offset instead of retrying forever.
    got, error = await consume(broker.address, "g1", 20)
    assert got == list(range(10))
    assert isinstance(error, CorruptMessageError)
    assert (error.queue_id, error.queue_offset, error.physical_offset) == (0, 10, bad.physical)

    # rmqctl: the messages before it, then one line naming broker, queue and offset; exit 1.
    done = rmqctl_consume(broker.address, "g2")
    assert done.returncode == 1, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    [line] = lines
    assert line.startswith(f"rmqctl: broker broker-a at {broker.address}: queue {TOPIC}:0, ")
    assert f"queue {TOPIC}:0, offset 10 " in line and f"commitlog offset {bad.physical}" in line
    assert done.stdout.count("m9:") == 1 and "m10:" not in done.stdout

    log = logged(broker, since, f"record at offset {bad.physical} unreadable")
    assert log.count(f"record at offset {bad.physical} unreadable") == 1  # once per offset
    assert corrupt_count(metrics_port, "read") == 1
    if kill:
        # An unclean stop validates every segment: recovery finds and quarantines it.
        assert f"{bad.size} bytes at offset {bad.physical} unreadable" in log
        assert corrupt_count(metrics_port, "recovery_quarantined") == 1
        copy = broker.data_dir / "quarantine" / f"commitlog-{bad.physical:020d}-{bad.size}"
        assert len(copy.read_bytes()) == bad.size


async def test_truncated_first_segment_keeps_its_intact_records(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int
) -> None:
    broker, on_disk = await filled_then_stopped(broker_factory, tmp_path, metrics_port, kill=False)
    first = broker.data_dir / "commitlog" / f"{0:020d}"
    cut = on_disk[20].pos + 100  # in the middle of message 20
    os.truncate(first, cut)
    lost = [i for i, r in on_disk.items() if r.path == first and r.pos + r.size > cut]
    assert lost[0] == 20 and len(lost) > 10
    since = len(broker.log())
    broker.start_and_wait()

    assert await readable(broker.address, 0, COUNT) == [i for i in range(COUNT) if i not in lost]
    code, header, _ = await pull(broker.address, lost[-1])
    assert code == ResponseCode.MESSAGE_CORRUPT
    assert header["physicalOffset"] == on_disk[lost[-1]].physical
    got, error = await consume(broker.address, "g1", 20)
    assert got == list(range(20))
    assert isinstance(error, CorruptMessageError) and error.queue_offset == 20
    logged(
        broker, since, f"commitlog bytes from offset {cut} to {SEGMENT} are missing ({first.name}"
    )
    assert corrupt_count(metrics_port, "segment_short") == 1
    assert corrupt_count(metrics_port, "recovery_quarantined") == 1


async def test_corrupt_consume_queue_entry_is_rebuilt_not_skipped(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int
) -> None:
    broker, on_disk = await filled_then_stopped(broker_factory, tmp_path, metrics_port, kill=False)
    cq = broker.data_dir / "consumequeue" / TOPIC / "0" / f"{0:020d}"
    with cq.open("r+b") as f:  # entry 5 points at message 7's record
        f.seek(5 * ENTRY.size)
        f.write(ENTRY.pack(on_disk[7].physical, on_disk[7].size, 0))
    since = len(broker.log())
    broker.start_and_wait()

    got, error = await consume(broker.address, "g1", 20)
    assert error is None
    assert got == list(range(COUNT))
    logged(broker, since, f"consume queue {TOPIC}:0: entry 5 pointed at no record of this queue")
    assert corrupt_count(metrics_port, "consumequeue_rebuilt") == 1
    wait_until(
        lambda: (
            cq.read_bytes()[5 * ENTRY.size : 5 * ENTRY.size + 8]
            == (on_disk[5].physical.to_bytes(8, "big"))
        ),
        "the rebuilt entry",
        10,
    )


async def test_a_deleted_consume_queue_file_is_rebuilt_and_offsets_go_on(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int
) -> None:
    # A new user's trial: the queue's ConsumeQueue file deleted from the stopped broker. It came
    # back serving none of the queue's 200 messages and gave the next one queue offset 0 again,
    # saying nothing.
    broker, _ = await filled_then_stopped(broker_factory, tmp_path, metrics_port, kill=False)
    for path in (broker.data_dir / "consumequeue" / TOPIC / "0").iterdir():
        path.unlink()
    since = len(broker.log())
    broker.start_and_wait()

    got, error = await consume(broker.address, "g1", 20)
    assert error is None
    assert got == list(range(COUNT))
    async with Producer(broker.address) as producer:
        assert (await producer.send(TOPIC, body(COUNT))).queue_offset == COUNT
    logged(broker, since, f"consume queue {TOPIC}:0: its directory holds no segment file")
    assert corrupt_count(metrics_port, "consumequeue_rebuilt") == 1


async def test_a_segment_cut_under_a_running_broker_kills_it_saying_why(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int
) -> None:
    # A new user's trial: a CommitLog segment file cut under the running broker (the same as a
    # page the disk cannot read). The next read of it faulted (SIGBUS) and the broker vanished,
    # its log saying nothing. The fault cannot be caught; it is said on stderr now.
    broker = new_broker(broker_factory, tmp_path, metrics_port)
    broker.start_and_wait()
    await produce(broker.address)
    on_disk = records_on_disk(broker.data_dir)
    second = sorted({r.path for r in on_disk.values()})[1]
    victim = next(k for k, r in sorted(on_disk.items()) if r.path == second and r.pos >= 8192)
    with second.open("r+b") as f:
        f.truncate(4096)
    with contextlib.suppress(OSError, RemotingError):
        await pull(broker.address, victim)
    assert broker.proc is not None
    status = broker.proc.wait(timeout=30)
    assert status == -signal.SIGBUS, broker.log()[-2000:]
    logged(broker, 0, "Fatal Python error: Bus error")


async def test_a_consumer_stuck_at_a_damaged_message_goes_on_once_it_is_skipped(
    broker_factory: type[BrokerProc], tmp_path: Path, metrics_port: int
) -> None:
    """A queue-bound consumer that met a message its broker cannot read raised
    CorruptMessageError and never pulled that queue again: after the operator's
    skipCorruptMessage the application had to be restarted to read on. It now raises the error
    once, keeps asking the broker (1 s, doubling), and reads on by itself once the message is
    skipped: the same consumer, every message after the damaged one delivered."""
    broker, on_disk = await filled_then_stopped(broker_factory, tmp_path, metrics_port, kill=False)
    bad = on_disk[10]
    flip(bad, 200)
    broker.start_and_wait()
    got: list[int] = []
    errors: list[CorruptMessageError] = []
    async with Consumer(broker.address, "g-skip", TOPIC, suspend_ms=200) as consumer:

        async def receive_until(done: Callable[[], bool], seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while not done() and time.monotonic() < deadline:
                try:
                    got.extend(m.queue_offset for m in await consumer.receive(0.5))
                except CorruptMessageError as exc:
                    errors.append(exc)

        await receive_until(lambda: bool(errors), 30)
        assert got == list(range(10)) and len(errors) == 1, (got, errors)
        assert (errors[0].queue_offset, errors[0].physical_offset) == (10, bad.physical)
        # Asked again meanwhile (after 1 s, then 2 s): the same answer, raised only once.
        await receive_until(lambda: False, 4)
        assert got == list(range(10)) and len(errors) == 1, (got, errors)

        conn = await RemotingClient.connect(broker.address)
        try:
            skip = SkipCorruptMessage(topic=TOPIC, queue_id=0, queue_offset=10)
            resp = await conn.request(skip.code, *skip.encode(), timeout=10)
            assert resp.code == ResponseCode.SUCCESS, resp
        finally:
            conn.close()
        # The old code never pulled the queue again: nothing more came.
        await receive_until(lambda: len(got) >= COUNT - 1, 60)
    assert got == [i for i in range(COUNT) if i != 10] and len(errors) == 1, (got[-5:], errors)
