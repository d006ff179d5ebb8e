"""A broker's ConsumeQueue files use disk for what they hold, and a full disk refuses their
writes cleanly (checked on broker processes).

Every queue that held a message had a ConsumeQueue file of ``consumequeue_segment_entries`` x 20
bytes allocated in full (6 MB at the production 300,000 entries): 1,500 nearly empty queues used
8.4 GB a replica. Now the files are sparse and get their blocks a chunk
(``consumequeue_allocate_bytes``) at a time, before entries are written there: 200 queues of
one message use 200 chunks. On a full disk the allocation fails (DISK_FULL, the file named in
the broker's log), the broker stays up and loses nothing it acknowledged, and takes the writes
again once space is freed; a write through the mapping into a hole would have killed it
(SIGBUS).

The disk-full test runs the broker in a mount namespace of its own (``unshare --mount``) on a
48 MB ext4 file system in a loop-mounted image file, which goes with the namespace; it needs
root, ``unshare``, ``mkfs.ext4`` and a free loop device, and is skipped without them."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records
from protocol.pull import MaxOffsetQuery
from protocol.remoting import Header
from remoting.client import RemotingClient
from tests.broker.test_queue_descriptors import each
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

ENTRIES = 300_000
"""The production ConsumeQueue segment: 6 MB a file."""
FULL_FILE = ENTRIES * 20


def blocks_under(path: Path) -> int:
    """Bytes the file system gave the files under ``path``: blocks, not sizes."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


async def create_topics(conn: RemotingClient, names: list[str]) -> None:
    async def create(i: int) -> None:
        header: Header = {"topic": names[i], "queues": 1}
        resp = await conn.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header, timeout=60)
        assert resp.code == ResponseCode.SUCCESS, (names[i], resp.code, resp.header)

    await each(len(names), create, inflight=8)


async def send(conn: RemotingClient, topic: str, body: bytes) -> tuple[int, str, int]:
    """(code, remark, queue offset or -1) of one message sent to queue 0 of ``topic``."""
    header: Header = {"topic": topic, "queueId": 0}
    resp = await conn.request(RequestCode.SEND_MESSAGE, header, body, 60)
    offset = int(str(resp.header["queueOffset"])) if resp.code == ResponseCode.SUCCESS else -1
    return resp.code, resp.remark, offset


async def queue_bodies(conn: RemotingClient, topic: str, count: int) -> list[bytes]:
    ask = MaxOffsetQuery(topic=topic, queue_id=0)
    resp = await conn.request(ask.code, *ask.encode(), 30)
    assert int(str(resp.header["offset"])) == count, (topic, resp.header)
    got: list[bytes] = []
    while len(got) < count:
        pull: Header = {
            "consumerGroup": "g",
            "topic": topic,
            "queueId": 0,
            "queueOffset": len(got),
            "maxMsgNums": 32,
            "suspendTimeoutMillis": 0,
        }
        resp = await conn.request(RequestCode.PULL_MESSAGE, pull, timeout=30)
        assert resp.code == ResponseCode.SUCCESS, (topic, len(got), resp.code, resp.header)
        got += [r.body for r in iter_records(resp.body or b"")]
    return got


async def test_two_hundred_one_message_queues_use_little_disk(tmp_path: Path) -> None:
    topics = [f"Sparse{t:03d}" for t in range(200)]
    broker = BrokerProc(tmp_path, extra_toml=f"consumequeue_segment_entries = {ENTRIES}\n")
    try:
        broker.start_and_wait(60)
        conn = await RemotingClient.connect(broker.address)
        try:
            await create_topics(conn, topics)

            async def one(i: int) -> None:
                code, remark, offset = await send(conn, topics[i], b"m%d" % i)
                assert (code, offset) == (ResponseCode.SUCCESS, 0), (i, code, remark)

            await each(len(topics), one)
        finally:
            conn.close()
        root = broker.data_dir / "consumequeue"
        files = [p for p in root.rglob("*") if p.is_file()]
        assert len(files) == 200 and all(p.stat().st_size == FULL_FILE for p in files)
        used = blocks_under(root)
        # 64 KiB a queue (the first chunk); allocated in full it was 200 x 6 MB = 1.2 GB.
        print(f"200 one-message queues: {used / 2**20:.1f} MiB of ConsumeQueue blocks")
        assert used <= 200 * 64 * 1024, used

        broker.kill9()  # the start after it loads and checks every queue: its hole reads zeros
        broker.start_and_wait(120)
        conn = await RemotingClient.connect(broker.address)
        try:

            async def again(i: int) -> None:
                code, remark, offset = await send(conn, topics[i], b"n%d" % i)
                assert (code, offset) == (ResponseCode.SUCCESS, 1), (i, code, remark)
                assert await queue_bodies(conn, topics[i], 2) == [b"m%d" % i, b"n%d" % i]

            await each(len(topics), again)
        finally:
            conn.close()
        assert blocks_under(root) <= 200 * 64 * 1024
    finally:
        broker.stop()


def _loop_fs_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount)"
    for tool in ("unshare", "mkfs.ext4", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists("/dev/loop-control"):
        return "needs loop devices"
    return None


def fill(directory: Path) -> int:
    """Write ``directory/filler`` until the file system is full; the bytes written."""
    written = 0
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 4096):
            chunk = b"f" * size
            while True:
                try:
                    written += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    finally:
        os.close(fd)
    return written


CHUNK = 8192
"""The broker's ``consumequeue_allocate_bytes`` in the disk-full test: 409 entries a chunk."""
PER_CHUNK = CHUNK // 20


@pytest.mark.skipif(_loop_fs_missing() is not None, reason=str(_loop_fs_missing()))
async def test_a_full_disk_refuses_queue_writes_and_the_broker_stays_up(tmp_path: Path) -> None:
    image, mount = tmp_path / "disk.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(48 << 20)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-b", "4096", "-m", "0", str(image)], check=True, timeout=60
    )
    broker = BrokerProc(
        tmp_path,
        segment_bytes=4 << 20,
        extra_toml=(
            f"consumequeue_segment_entries = {ENTRIES}\n"
            f"consumequeue_allocate_bytes = {CHUNK}\n"
            "index_enable = false\n"
        ),
    )
    # Its store on the small disk (its config and log stay outside).
    at = broker.argv.index("--data-dir") + 1
    broker.data_dir = mount / "broker-a"
    broker.argv[at] = str(broker.data_dir)
    # Its own mount namespace, where the image is mounted at ``mount``; unshare and sh exec
    # into the broker, so its PID is the broker's (and the mount and the loop device go with
    # the namespace when it ends). Its files are seen from here through /proc/<pid>/root.
    broker.argv = [
        "unshare", "--mount", "--propagation", "private",
        "sh", "-c", f'mount -o loop "{image}" "{mount}" && exec "$@"', "sh",
        *broker.argv,
    ]  # fmt: skip
    topics = [f"Full{t:02d}" for t in range(60)]
    try:
        broker.start_and_wait(60)
        inside = Path(f"/proc/{broker.pid}/root") / str(mount).lstrip("/")
        conn = await RemotingClient.connect(broker.address)
        try:
            await create_topics(conn, topics)
            # 40 queues of one message (allocated in full: 240 MB on a 48 MB disk, DISK_FULL
            # from the 7th on), and 400 messages in the first one, near its first chunk's end.
            acked: dict[str, list[bytes]] = {t: [] for t in topics}
            for t in topics[:40]:
                code, remark, _ = await send(conn, t, b"first " + t.encode())
                assert code == ResponseCode.SUCCESS, (t, code, remark)
                acked[t].append(b"first " + t.encode())
            for i in range(1, 400):
                code, remark, _ = await send(conn, topics[0], b"more %d" % i)
                assert code == ResponseCode.SUCCESS, (i, code, remark)
                acked[topics[0]].append(b"more %d" % i)

            filled = fill(inside)
            assert filled > 0
            # A new queue needs its directory and its first chunk: refused, the file named in
            # the log (a directory that could not be created raised OSError, SYSTEM_ERROR).
            for t in topics[40:50]:
                code, remark, _ = await send(conn, t, b"refused")
                assert code == ResponseCode.DISK_FULL, (t, code, remark)
            assert broker.alive()
            # The first queue takes what its allocated chunk holds (the CommitLog's segment is
            # allocated in full), then is refused where the next chunk begins.
            outcomes = []
            for i in range(400, 420):
                code, remark, offset = await send(conn, topics[0], b"more %d" % i)
                outcomes.append((code, offset))
                if code == ResponseCode.SUCCESS:
                    acked[topics[0]].append(b"more %d" % i)
            ok = [(ResponseCode.SUCCESS, i) for i in range(400, PER_CHUNK)]
            assert outcomes == ok + [(ResponseCode.DISK_FULL, -1)] * (420 - PER_CHUNK)
            assert broker.alive()
            log = broker.log()
            assert f"no space to allocate {CHUNK} bytes at {CHUNK} of " in log
            assert f"/consumequeue/{topics[0]}/0/{0:020d}" in log
            assert f"cannot create {broker.data_dir}/consumequeue/{topics[40]}/0: " in log
            # Reads go on.
            for t in topics[:40]:
                assert await queue_bodies(conn, t, len(acked[t])) == acked[t]

            (inside / "filler").unlink()  # space freed: writes go on
            for t in topics[40:]:
                code, remark, offset = await send(conn, t, b"later " + t.encode())
                assert (code, offset) == (ResponseCode.SUCCESS, 0), (t, code, remark)
                acked[t].append(b"later " + t.encode())
            code, remark, offset = await send(conn, topics[0], b"after")
            assert (code, offset) == (ResponseCode.SUCCESS, PER_CHUNK), remark
            acked[topics[0]].append(b"after")
        finally:
            conn.close()

        broker.kill9()  # everything acknowledged is there after a start on the same disk
        wait_until(lambda: not broker.alive(), "the broker to die", 30)
        broker.start_and_wait(120)
        conn = await RemotingClient.connect(broker.address)
        try:
            for t in topics:
                assert await queue_bodies(conn, t, len(acked[t])) == acked[t], t
        finally:
            conn.close()
    finally:
        broker.stop()
