"""Three ``rmq-controller`` processes against a hostile or unlucky peer (issue 9, items 2, 6, 7):

- a forged Raft heartbeat with term 2^64-1 from a process that is not a member, over a real
  socket: all three stay up, also after a restart (they used to exit with an OverflowError,
  again at every restart, the term being persisted);
- a storm of forged TimeoutNow messages does not move leadership;
- a leader frozen with SIGSTOP while the others elect a new one never answers a broker
  heartbeat after SIGCONT (its answer would renew a master's write lease);
- a Raft log corrupted on all three controllers: each refuses to start with one line naming
  the file and the offset, and changes nothing on disk.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from protocol.codes import ControllerCode, ResponseCode
from protocol.controller_requests.brokers import RegisterBroker
from protocol.controller_requests.heartbeats import BrokerHeartbeat
from protocol.remoting import Frame, FrameDecoder, encode_frame, request
from storage.raftlog.framing import scan_segment
from tests.controller.support import (
    ControllerCluster,
    ControllerProc,
    FakeBroker,
    agreed_leader,
    metadata,
)
from tests.support.wait import stays_async, wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    with ControllerCluster(tmp_path) as c:
        yield c


# --- raw frames over real sockets -------------------------------------------------------------


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def raft_frame(wire: list[Any], opaque: int = 1) -> bytes:
    """A RAFT_MESSAGE frame around a msgpack array (any values, out of range included)."""
    body = msgpack.packb(wire, use_bin_type=True)
    return encode_frame(request(ControllerCode.RAFT_MESSAGE, opaque, None, body, oneway=True))


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def read_response(sock: socket.socket, timeout: float) -> Frame:
    sock.settimeout(timeout)
    decoder = FrameDecoder(1 << 20)
    while True:
        data = sock.recv(65536)
        assert data, "the controller closed the connection instead of answering"
        frames = decoder.feed(data)
        if frames:
            return frames[0]


def frame(req: BrokerHeartbeat | RegisterBroker, opaque: int) -> bytes:
    return encode_frame(request(req.code, opaque, *req.encode()))


async def terms(cluster: ControllerCluster) -> dict[str, int]:
    docs = {i: await metadata(p.address) for i, p in cluster.procs.items()}
    return {i: int(d["term"]) for i, d in docs.items() if d is not None}


def all_alive(cluster: ControllerCluster) -> bool:
    return all(p.alive() for p in cluster.procs.values())


async def stays_up(cluster: ControllerCluster, seconds: float) -> None:
    def dead() -> list[str]:
        return [p.name for p in cluster.procs.values() if not p.alive()]

    await stays_async(
        lambda: not dead(),
        seconds,
        "every controller running",
        interval=0.1,
        on_failure=lambda: (
            f"{dead()} exited:\n"
            + "\n".join(p.log()[-2000:] for p in cluster.procs.values() if not p.alive())
        ),
    )


# --- item 2: a forged heartbeat with term 2^64-1 -----------------------------------------------


async def test_a_forged_heartbeat_with_term_2_64_minus_1_stops_nobody(
    cluster: ControllerCluster,
) -> None:
    addresses = [p.address for p in cluster.procs.values()]
    await agreed_leader(addresses)
    for node_id, proc in cluster.procs.items():
        # Heartbeat [tag 4, src, dst, term, commit, read_seq] from "rogue", not a member.
        with socket.create_connection(host_port(proc.address), timeout=2) as sock:
            sock.sendall(raft_frame([4, "rogue", node_id, (1 << 64) - 1, 0, 0]))
            assert closed_by_peer(sock, 5.0), "the bad message's connection was not dropped"
        # In range but from a stranger, and the largest term that fits: dropped by the core.
        with socket.create_connection(host_port(proc.address), timeout=2) as sock:
            sock.sendall(raft_frame([4, "rogue", node_id, (1 << 63) - 2, 0, 0], 2))
            sock.sendall(raft_frame([4, "rogue", node_id, 1 << 63, 0, 0], 3))
            assert closed_by_peer(sock, 5.0)
    await stays_up(cluster, 3.0)  # several election timeouts: the pre-fix exit came within one
    await agreed_leader(addresses)
    assert max((await terms(cluster)).values()) < 1000
    for proc in cluster.procs.values():
        assert "OverflowError" not in proc.log()
        assert "closing connection: bad raft message" in proc.log()

    # And after a restart of all three (the bad term used to be persisted: they exited again).
    for proc in cluster.procs.values():
        assert proc.stop() == 0
    cluster.start()
    await agreed_leader(addresses)
    await stays_up(cluster, 1.5)
    assert max((await terms(cluster)).values()) < 1000


# --- item 2: a TimeoutNow storm -----------------------------------------------------------------


async def test_a_timeout_now_storm_does_not_move_leadership(cluster: ControllerCluster) -> None:
    addresses = [p.address for p in cluster.procs.values()]
    leader = await agreed_leader(addresses)
    term = (await terms(cluster))[leader]
    followers = [i for i in cluster.procs if i != leader]
    socks = {i: socket.create_connection(host_port(cluster.procs[i].address)) for i in followers}
    try:
        # 200 rounds 20 ms apart: at least 4 s of storm (several election timeouts), 1,600
        # frames however slow the machine (a count sent within 4 s is a rate, which load lowers).
        sent = 0
        for _ in range(200):
            for dst in followers:
                for src in (*followers, "rogue"):
                    if src == dst:
                        continue
                    for t in (term, term + 1):
                        # TimeoutNow [tag 8, src, dst, term]: "campaign now, skip the lease".
                        socks[dst].sendall(raft_frame([8, src, dst, t], sent))
                        sent += 1
            await asyncio.sleep(0.02)
    finally:
        for sock in socks.values():
            sock.close()
    assert await agreed_leader(addresses) == leader
    after = await terms(cluster)
    assert after == dict.fromkeys(cluster.procs, term), f"terms moved from {term}: {after}"
    assert all_alive(cluster)


# --- item 6: a deposed leader thawed by SIGCONT ---------------------------------------------------


async def test_a_thawed_deposed_leader_never_answers_a_broker_heartbeat(
    cluster: ControllerCluster,
) -> None:
    addresses = [p.address for p in cluster.procs.values()]
    old = await agreed_leader(addresses)
    proc = cluster.procs[old]
    broker = await FakeBroker(cluster.addresses).start()
    sock = socket.create_connection(host_port(proc.address), timeout=2)
    try:
        await broker.join()
        # This connection speaks for the broker (a heartbeat counts only on the connection
        # that registered it), as the broker's own connection to the leader would.
        sock.sendall(frame(broker.registration(), 1))
        registered = read_response(sock, 10.0)
        assert registered.code == ResponseCode.SUCCESS, registered.header
        # While it leads under a lease, the leader answers the heartbeat on this connection.
        opaque = 1

        def answered() -> bool:
            nonlocal opaque
            opaque += 1
            sock.sendall(frame(broker.beat(), opaque))
            return read_response(sock, 5.0).code == ResponseCode.SUCCESS

        wait_until(answered, "the leader to answer a broker heartbeat", 10, interval=0.05)

        proc.signal(signal.SIGSTOP)
        try:
            survivors = [p.address for i, p in cluster.procs.items() if i != old]
            new = await agreed_leader(survivors)
            assert new != old
            # The heartbeat waits in the frozen process's socket: the first thing it reads
            # after SIGCONT, before any of the ticks it missed or the new leader's messages.
            sock.sendall(frame(broker.beat(), 1000))
        finally:
            proc.signal(signal.SIGCONT)
        resp = read_response(sock, 10.0)
        assert resp.code == ResponseCode.CONTROLLER_NOT_LEADER, (
            f"the deposed leader answered {resp.code} {resp.header}: it would renew a lease"
        )
        # It follows the new leader soon after (and keeps refusing meanwhile).
        seen: list[object] = []

        async def follows() -> bool:
            doc = await metadata(proc.address)
            seen.append(doc)
            return doc is not None and doc["leaderId"] == new

        await wait_until_async(
            follows,
            f"{old} to follow {new}",
            10,
            interval=0.05,
            on_timeout=lambda: f"{old} did not follow {new}: {seen[-1]}",
        )
        sock.sendall(frame(broker.beat(), 1001))
        assert read_response(sock, 5.0).code == ResponseCode.CONTROLLER_NOT_LEADER
    finally:
        sock.close()
        await broker.stop()


# --- item 7: the Raft log corrupt on all three ----------------------------------------------------


def tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def corrupt_middle_entry(data_dir: Path) -> tuple[Path, int]:
    """Flip one byte inside the entry in the middle of the (only) log segment."""
    [segment] = sorted((data_dir / "log").glob("*.log"))
    raw = bytearray(segment.read_bytes())
    scan = scan_segment(bytes(raw), int(segment.name.split(".")[0]))
    assert scan.error is None and len(scan.entries) >= 20, (scan.error, len(scan.entries))
    offset = scan.offsets[len(scan.offsets) // 2]
    raw[offset + 12] ^= 0x55  # inside the CRC-covered body (its term)
    segment.write_bytes(bytes(raw))
    return segment, offset


@pytest.mark.parametrize("stop", ["sigterm", "kill9"])
async def test_a_raft_log_corrupt_on_all_three_refuses_to_start(
    cluster: ControllerCluster, tmp_path: Path, stop: str
) -> None:
    addresses = [p.address for p in cluster.procs.values()]
    await agreed_leader(addresses)
    brokers = [await FakeBroker(cluster.addresses, f"broker-{i}").start() for i in range(10)]
    try:
        for b in brokers:
            await b.join()  # three committed entries each
    finally:
        for b in brokers:
            await b.stop()
    # Committed takes two of the three: the test damages the middle of every node's log, so each
    # must hold all of it before it stops (a follower killed while still behind held 19 entries).
    await all_hold_the_same_commit(addresses)
    for proc in cluster.procs.values():
        if stop == "kill9":
            proc.kill9()  # the hard state file is older; the commit hint is not
        else:
            assert proc.stop() == 0  # the hard state records the commit index

    pristine = {i: tmp_path / f"pristine-{i}" for i in cluster.procs}
    damage: dict[str, tuple[Path, int]] = {}
    for node_id, proc in cluster.procs.items():
        shutil.copytree(proc.data_dir, pristine[node_id])
        damage[node_id] = corrupt_middle_entry(proc.data_dir)
    before = {i: tree(p.data_dir) for i, p in cluster.procs.items()}

    for node_id, proc in cluster.procs.items():
        logged = len(proc.log())
        proc.start()
        assert proc.proc is not None
        status = proc.proc.wait(timeout=30)
        out = proc.log()[logged:]
        lines = [line for line in out.splitlines() if line.strip()]
        segment, offset = damage[node_id]
        assert status == 2, f"{proc.name} did not refuse a damaged log ({status}):\n{out}"
        assert len(lines) == 1, f"{proc.name} printed {len(lines)} lines:\n{out}"
        assert "Traceback" not in out
        assert lines[0].startswith("rmq-controller: cannot start: "), lines[0]
        assert str(segment) in lines[0] and f"offset {offset}" in lines[0], lines[0]
        assert "committed" in lines[0]
        assert tree(proc.data_dir) == before[node_id], f"{proc.name} changed its files"

    # What an operator does (docs/operations.md): put back an intact copy of the log (a backup,
    # or a healthy peer's directory) on two of them; they start and nothing committed is lost.
    for node_id in list(cluster.procs)[:2]:
        proc = cluster.procs[node_id]
        shutil.rmtree(proc.data_dir)
        shutil.copytree(pristine[node_id], proc.data_dir)
        proc.start()
    restored: list[ControllerProc] = list(cluster.procs.values())[:2]
    await agreed_leader([p.address for p in restored])
    for i in range(10):
        resp = None
        for p in restored:
            doc = await _replica_info(p.address, f"broker-{i}")
            if doc is not None:
                resp = doc
                break
        assert resp is not None and [r["brokerId"] for r in resp["replicas"]] == [1], resp


async def all_hold_the_same_commit(addresses: list[str]) -> None:
    """Every controller answers with one commit index (the followers have caught up)."""
    docs: list[dict[str, Any] | None] = []

    async def caught_up() -> bool:
        docs[:] = [await metadata(a) for a in addresses]
        indexes = {d["commitIndex"] for d in docs if d is not None}
        return len(indexes) == 1 and all(d is not None for d in docs)

    await wait_until_async(
        caught_up,
        "every controller at one commit index",
        30,
        interval=0.05,
        on_timeout=lambda: str(docs),
    )


async def _replica_info(address: str, broker_name: str) -> dict[str, Any] | None:
    from tests.controller.support import request as raw_request

    resp = await raw_request(address, 1004, {"brokerName": broker_name})
    if resp is None or resp.code != 0 or not resp.body:
        return None
    doc: dict[str, Any] = msgpack.unpackb(resp.body)
    return doc
