"""Controller benchmark: three ``rmq-controller`` processes on loopback, fsync on (the defaults).

Measures, against real controller processes in a temporary directory:
  1. committed entries/s with many proposals in flight (several connections to the leader),
     then again with 4,096 in flight (``--flood``): the controllers shed what exceeds
     ``max_inflight_proposals`` with SYSTEM_BUSY, the bench retries it after a back-off, and the
     leader's id and term before and after the phase give the leader changes (target 0); the
     entries are fsynced, many per fsync (group commit: every proposal made while an fsync runs
     goes into the next one),
  2. commit latency p50/p99 with one proposal at a time,
  3. failover: rounds of kill -9 of the leader, each timed from the kill until a new leader
     has committed and answered a write; the killed controller is restarted from its disk and
     caught up before the next round,
  4. PySyncObj side by side (the project's ``bench`` extra, which ``make bench`` installs):
     three nodes as processes on loopback with a replicated dict and its journal file, the same 1 KiB puts
     driven through its own API inside the leader's process, at our window and at 16 times it
     (PySyncObj batches appends every 0.1 s, so its throughput grows with the window), then
     one at a time. PySyncObj never fsyncs its journal, so the comparison favours it.

The proposals travel the controller's ordinary write path: CONTROLLER_APPLY_BROKER_ID (1013)
for one synthetic broker group, broker id 1, with a ``registerCheckCode`` sized so that each
Raft entry (the encoded ApplyBrokerId event) is exactly ``--size`` bytes. Each request is
decided by the active controller against its applied state, appended to the Raft log, fsynced
on a quorum, applied and then answered; re-applying an id to the code that already holds it is
a no-op compare-and-set, so the state stays one group however many entries are written. An
answer of SUCCESS is one committed entry.

Targets (issue 3): 12,000 entries/s (ten times PySyncObj's 1.15k ops/s measured on this
machine) and a failover p50 under 1 s over 20 kills; (issue 17) at least PySyncObj's best in the
same run, and 0 leader changes at 4,096 in flight. Nothing is asserted: these are figures.

    python bench/controller_bench.py [--entries N] [--inflight N] [--flood N] [--latency N]
                                     [--kills N] [--size BYTES] [--max-inflight-proposals N]
                                     [--only controller|pysyncobj]

Every process started here is ended by its PID (SIGTERM, then SIGKILL), also on error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.figures import cpu_seconds
from controller.config import ControllerConfig
from controller.metadata import ApplyBrokerId as ApplyBrokerIdEvent
from controller.metadata import encode_event
from daemon.tasks import cancel_and_wait
from protocol.codes import ResponseCode, code_name
from protocol.controller_requests.brokers import ApplyBrokerId
from protocol.controller_requests.groups import GetReplicaInfo
from protocol.remoting import Frame
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from remoting.failover import AddressFailover
from tests.controller.support import ControllerCluster, ControllerProc, agreed_leader, metadata
from tests.support.procs import Daemon, free_port
from tests.support.wait import wait_until

TARGET_ENTRIES_PER_S = 12_000
PYSYNCOBJ_MEASURED_OPS_PER_S = 1_150  # the figure for PySyncObj on this machine
TARGET_FAILOVER_P50_S = 1.0
TARGET_LEADER_CHANGES = 0  # issue 17: none at 4,096 in flight (the controller sheds load)
BUSY_BACKOFF = AddressFailover("127.0.0.1:1")
"""A SYSTEM_BUSY answer is retried after the back-off of the SDK, rmqctl and the brokers
(0.25 s doubling to 2 s, with jitter)."""

CLUSTER = "BenchCluster"
GROUP = "bench-group"
ADDRESS = "127.0.0.1:1"


# --- figures -----------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by the nearest-rank method; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def process_cpu(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` so far (0 once it is gone), read in nanoseconds
    by :func:`bench.figures.cpu_seconds`: a tick of /proc's 10 ms is more than the brokers spend
    closing 200 connections, which read as 0 at the clients' 1x column."""
    try:
        return cpu_seconds(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


# --- the controller's write path ---------------------------------------------------------------


def apply_header(size: int, group: str = GROUP) -> ApplyBrokerId:
    """An APPLY_BROKER_ID request whose Raft entry (the encoded event) is ``size`` bytes."""

    def entry_bytes(code: str) -> int:
        event = ApplyBrokerIdEvent(
            cluster=CLUSTER, broker_name=group, broker_id=1, register_code=code, address=ADDRESS
        )
        return len(encode_event(event))

    fixed = entry_bytes("")
    code = "c" * max(0, size - fixed)
    while entry_bytes(code) > size and code:  # msgpack's string header grows with the length
        code = code[:-1]
    return ApplyBrokerId(
        cluster=CLUSTER,
        broker_name=group,
        broker_id=1,
        register_check_code=code,
        broker_address=ADDRESS,
    )


def entry_size(header: ApplyBrokerId) -> int:
    event = ApplyBrokerIdEvent(
        cluster=header.cluster,
        broker_name=header.broker_name,
        broker_id=header.broker_id,
        register_code=header.register_check_code,
        address=header.broker_address,
    )
    return len(encode_event(event))


class WriteFailed(Exception):
    pass


async def write(conn: RemotingClient, header: ApplyBrokerId, timeout: float = 5.0) -> Frame:
    return await conn.request(header.code, *header.encode(), timeout=timeout)


async def write_ok(conn: RemotingClient, header: ApplyBrokerId) -> None:
    """One write that must succeed (SYSTEM_BUSY is retried)."""
    for _ in range(100):
        resp = await write(conn, header)
        if resp.code == ResponseCode.SUCCESS:
            return
        if resp.code != ResponseCode.SYSTEM_BUSY:
            raise WriteFailed(f"write answered {resp.code}: {resp.header}")
        await asyncio.sleep(0.01)
    raise WriteFailed("write stayed busy")


async def leader_address(cluster: ControllerCluster, procs: list[ControllerProc]) -> str:
    lead = await agreed_leader([p.address for p in procs], timeout=30.0)
    return cluster.procs[lead].address


# --- throughput and latency --------------------------------------------------------------------


class LeaderLink:
    """Connections to the active controller; found again when a write is refused with
    CONTROLLER_NOT_LEADER (a leadership change during the phase is counted and reported)."""

    def __init__(self, cluster: ControllerCluster, count: int) -> None:
        self.cluster = cluster
        self.count = count
        self.conns: list[RemotingClient] = []
        self.generation = 0
        self.changes = 0
        self._lock = asyncio.Lock()

    async def connect(self) -> str:
        address = await leader_address(self.cluster, list(self.cluster.procs.values()))
        fresh = [await RemotingClient.connect(address) for _ in range(self.count)]
        self.close()
        self.conns = fresh
        self.generation += 1
        return address

    async def follow(self, generation: int) -> None:
        async with self._lock:
            if generation == self.generation:
                self.changes += 1
                await self.connect()

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.conns = []


def scrape(proc: ControllerProc) -> dict[str, float]:
    """The unlabelled samples of ``proc``'s /metrics (and the fsync histogram's count)."""
    port = getattr(proc, "metrics_port", None)
    if port is None:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    samples: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if line.startswith("#") or "{" in name or not value:
            continue
        with contextlib.suppress(ValueError):
            samples[name] = float(value)
    return samples


async def leader_and_term(cluster: ControllerCluster) -> tuple[str, int]:
    """The agreed leader's id and its term."""
    lead = await agreed_leader([p.address for p in cluster.procs.values()], timeout=30.0)
    doc = await metadata(cluster.procs[lead].address)
    return lead, int(doc["term"]) if doc is not None else -1


async def bench_throughput(
    cluster: ControllerCluster, header: ApplyBrokerId, n: int, inflight: int, connections: int
) -> float:
    link = LeaderLink(cluster, connections)
    before = await leader_and_term(cluster)
    address = await link.connect()
    leader = next(p for p in cluster.procs.values() if p.address == address)
    pids = [leader.pid] + [p.pid for p in cluster.procs.values() if p is not leader]
    done = 0
    busy = 0
    remaining = iter(range(n))

    async def worker(slot: int) -> None:
        nonlocal done, busy
        busy_round = 0
        for _ in remaining:
            while True:
                generation = link.generation
                try:
                    resp = await write(link.conns[slot % connections], header, timeout=30.0)
                except RemotingError:
                    await link.follow(generation)
                    continue
                if resp.code == ResponseCode.SUCCESS:
                    done += 1
                    break
                if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:
                    await link.follow(generation)
                    continue
                if resp.code != ResponseCode.SYSTEM_BUSY:
                    raise WriteFailed(f"write answered {resp.code}: {resp.header}")
                busy += 1
                await asyncio.sleep(BUSY_BACKOFF.backoff(busy_round))
                busy_round += 1
            busy_round = 0

    procs = [leader] + [p for p in cluster.procs.values() if p is not leader]
    metrics0 = [await asyncio.to_thread(scrape, p) for p in procs]
    try:
        cpu0 = [process_cpu(p) for p in pids]
        client0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(inflight)))
        seconds = time.perf_counter() - t0
        client = time.process_time() - client0
        cpu = [process_cpu(p) - c for p, c in zip(pids, cpu0, strict=True)]
    finally:
        link.close()
    after = await leader_and_term(cluster)
    metrics1 = [await asyncio.to_thread(scrape, p) for p in procs]
    rate = done / seconds
    size = entry_size(header)
    # Each term after the first is one election (a leader re-elected in a new term counts too).
    changes = after[1] - before[1]
    print(
        f"throughput ({inflight} in flight on {connections} connections, fsynced): {done:,} "
        f"entries in {seconds:.2f} s = {rate:,.0f} entries/s, {rate * size / 1e6:.2f} MB/s",
        flush=True,
    )
    print(
        f"  leader {before[0]} term {before[1]} before, {after[0]} term {after[1]} after: "
        f"{changes} leader changes (target {TARGET_LEADER_CHANGES}); {busy:,} busy answers "
        f"(SYSTEM_BUSY, retried after a back-off); the bench followed the leader "
        f"{link.changes} times",
        flush=True,
    )
    if metrics0[0] and metrics1[0] and changes == 0:

        def delta(i: int, name: str) -> float:
            return metrics1[i].get(name, 0.0) - metrics0[i].get(name, 0.0)

        fsyncs = delta(0, "rmq_controller_raft_fsync_seconds_count")
        entries = delta(0, "rmq_controller_raft_last_index")
        shed = delta(0, "rmq_controller_proposals_shed_total")
        per = entries / fsyncs if fsyncs else float("nan")
        print(
            f"  group commit on the leader: {entries:,.0f} entries in {fsyncs:,.0f} fsyncs = "
            f"{per:,.1f} entries per fsync; shed by the leader "
            f"(rmq_controller_proposals_shed_total): {shed:,.0f}",
            flush=True,
        )
    print(
        "  CPU per 10k entries: controllers (leader first) "
        + ", ".join(f"{c / done * 10_000:.2f} s" for c in cpu)
        + f"; bench client {client / done * 10_000:.2f} s",
        flush=True,
    )
    print(
        f"  ratio to target {TARGET_ENTRIES_PER_S:,}/s: {rate / TARGET_ENTRIES_PER_S:.3f}; "
        f"to the issue's PySyncObj figure {PYSYNCOBJ_MEASURED_OPS_PER_S:,}/s: "
        f"{rate / PYSYNCOBJ_MEASURED_OPS_PER_S:.2f}",
        flush=True,
    )
    return rate


async def bench_latency(address: str, header: ApplyBrokerId, n: int) -> list[float]:
    conn = await RemotingClient.connect(address)
    lat: list[float] = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            resp = await write(conn, header)
            if resp.code != ResponseCode.SUCCESS:
                raise WriteFailed(f"write answered {resp.code}: {resp.header}")
            lat.append(time.perf_counter() - t0)
    finally:
        conn.close()
    print(
        f"commit latency (one at a time, {n:,} writes): p50 {ms(percentile(lat, 0.5))}  "
        f"p99 {ms(percentile(lat, 0.99))}  max {ms(max(lat))}",
        flush=True,
    )
    return lat


# --- failover ----------------------------------------------------------------------------------


Attempt = tuple[str, float, float, str]
"""One write of :func:`first_write_after_kill`: the address, its start and end
(``time.perf_counter()``), its outcome (the response code's name, or the error's type)."""


async def first_write_after_kill(
    survivors: list[str], header: ApplyBrokerId, attempts: list[Attempt] | None = None
) -> str:
    """Keep writing to every survivor until one answers SUCCESS; returns its address. Each
    write's outcome goes to ``attempts`` when given (where a failover's time went)."""
    won: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def keep_trying(address: str) -> None:
        conn: RemotingClient | None = None
        try:
            while not won.done():
                t0 = time.perf_counter()
                outcome = ""
                try:
                    if conn is None or conn.is_closed:
                        conn = await RemotingClient.connect(address, 0.5)
                    resp = await write(conn, header, timeout=3.0)
                    outcome = code_name(resp.code)
                    if resp.code == ResponseCode.SUCCESS and not won.done():
                        won.set_result(address)
                except RemotingError as exc:
                    outcome = type(exc).__name__
                    if conn is not None:
                        conn.close()
                    conn = None
                if attempts is not None:
                    attempts.append((address, t0, time.perf_counter(), outcome))
                await asyncio.sleep(0.01)
        finally:
            if conn is not None:
                conn.close()

    tasks = [asyncio.create_task(keep_trying(a)) for a in survivors]
    try:
        async with asyncio.timeout(60):
            return await won
    finally:
        await cancel_and_wait(tasks)


async def caught_up(proc: ControllerProc, group: str, timeout: float = 60.0) -> None:
    """Wait until ``proc`` answers GET_REPLICA_INFO for ``group`` (it has applied its entry)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            conn = await RemotingClient.connect(proc.address, 0.5)
            try:
                ask = GetReplicaInfo(broker_name=group)
                resp = await conn.request(ask.code, *ask.encode(), timeout=2.0)
            finally:
                conn.close()
            if resp.code == ResponseCode.SUCCESS:
                return
        except RemotingError:
            pass
        if loop.time() > deadline:
            raise WriteFailed(f"{proc.name} did not catch up within {timeout:g}s")
        await asyncio.sleep(0.05)


async def bench_failover(cluster: ControllerCluster, header: ApplyBrokerId, kills: int) -> None:
    procs = list(cluster.procs.values())
    took: list[float] = []
    for round_no in range(1, kills + 1):
        old = await leader_address(cluster, procs)
        victim = next(p for p in procs if p.address == old)
        survivors = [p.address for p in procs if p is not victim]
        t0 = time.perf_counter()
        victim.kill9()
        new = await first_write_after_kill(survivors, header)
        seconds = time.perf_counter() - t0
        took.append(seconds)
        new_id = next(p.node_id for p in procs if p.address == new)
        print(
            f"  kill {round_no:2d}: leader {victim.node_id} killed, {new_id} committed a write "
            f"after {ms(seconds)}",
            flush=True,
        )
        # Restart the victim from its disk and let it catch up before the next kill.
        victim.start()
        wait_until(victim.alive, f"{victim.name} to start", 5)
        marker = apply_header(64, group=f"failover-{round_no}")
        conn = await RemotingClient.connect(new)
        try:
            await write_ok(conn, marker)
        finally:
            conn.close()
        await caught_up(victim, marker.broker_name)
    print(
        f"failover over {kills} kills (kill -9 to a new leader's committed write): "
        f"p50 {ms(percentile(took, 0.5))}  p90 {ms(percentile(took, 0.9))}  max {ms(max(took))}; "
        f"p50 / target {TARGET_FAILOVER_P50_S:g} s = {percentile(took, 0.5) / TARGET_FAILOVER_P50_S:.2f}",
        flush=True,
    )


async def bench_controller(args: argparse.Namespace, tmp: Path) -> float | None:
    header = apply_header(args.size)
    (tmp / "controllers").mkdir()
    cluster = ControllerCluster(
        tmp / "controllers", config={"max_inflight_proposals": args.max_inflight_proposals}
    )
    for node_id, port in cluster.ports.items():  # /metrics on: fsyncs and shed writes are read
        metrics_port = free_port()
        proc = cluster.make(node_id, port, cluster.peers, "--metrics-port", str(metrics_port))
        proc.metrics_port = metrics_port  # type: ignore[attr-defined]
        cluster.procs[node_id] = proc
    try:
        cluster.start()
        procs = list(cluster.procs.values())
        address = await leader_address(cluster, procs)
        leader = next(p for p in procs if p.address == address)
        print(
            f"controllers: {', '.join(f'{p.node_id} pid {p.pid} {p.address}' for p in procs)}; "
            f"leader {leader.node_id}; entries of {entry_size(header)} B (APPLY_BROKER_ID), "
            f"fsync on",
            flush=True,
        )
        conn = await RemotingClient.connect(address)
        try:
            for _ in range(200):  # warm-up: the group's first entry, code paths
                await write_ok(conn, header)
        finally:
            conn.close()
        rate = await bench_throughput(
            cluster, header, args.entries, args.inflight, args.connections
        )
        if args.flood:
            print(
                f"load shedding: {args.flood:,} in flight (max_inflight_proposals "
                f"{args.max_inflight_proposals:,})",
                flush=True,
            )
            await bench_throughput(cluster, header, args.entries, args.flood, args.connections)
        await bench_latency(await leader_address(cluster, procs), header, args.latency)
        if args.kills:
            await bench_failover(cluster, header, args.kills)
        return rate
    finally:
        cluster.stop()


# --- PySyncObj ---------------------------------------------------------------------------------


def ensure_pysyncobj() -> bool:
    """True if pysyncobj (the ``bench`` extra that ``make bench`` installs) is importable."""
    if importlib.util.find_spec("pysyncobj") is not None:
        return True
    print(
        "no pysyncobj (`make bench` installs it): the PySyncObj comparison is skipped", flush=True
    )
    return False


def pysyncobj_throughput(store: Any, value: bytes, n: int, window: int) -> dict[str, Any]:
    """``n`` puts through PySyncObj's callback API with ``window`` in flight."""
    sem = threading.Semaphore(window)
    all_done = threading.Event()
    lock = threading.Lock()
    counts = {"done": 0, "failed": 0}

    def on_result(result: Any, error: int) -> None:
        with lock:
            counts["done" if error == 0 else "failed"] += 1
            if counts["done"] + counts["failed"] == n:
                all_done.set()
        sem.release()

    t0 = time.perf_counter()
    for i in range(n):
        sem.acquire()
        store.put(f"k{i % 1000}", value, callback=on_result)
    finished = all_done.wait(300)
    seconds = time.perf_counter() - t0
    return {"inflight": window, **counts, "seconds": seconds, "finished": finished}


def pysyncobj_node(args: argparse.Namespace) -> int:
    """One PySyncObj node (run as its own process by :func:`bench_pysyncobj`). Whichever node is
    the leader runs the workload in-process (PySyncObj's own API, no client hop) and writes its
    figures as JSON to ``--pso-result``; the others replicate until they are stopped."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class Store(SyncObj):  # type: ignore[misc]
        def __init__(self, me: str, partners: list[str], conf: Any) -> None:
            super().__init__(me, partners, conf)
            self.data: dict[str, bytes] = {}

        @replicated  # type: ignore[untyped-decorator]
        def put(self, key: str, value: bytes) -> int:
            self.data[key] = value
            return len(self.data)

    addresses = args.pso_peers.split(",")
    me = addresses[args.pysyncobj_node]
    work = Path(args.pso_dir)
    conf = SyncObjConf(journalFile=str(work / f"node{args.pysyncobj_node}.journal"))
    store = Store(me, [a for a in addresses if a != me], conf)
    deadline = time.monotonic() + 30
    while not (store._isReady() and store._getLeader() is not None):
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.01)
    if store._getLeader().address != me:
        while True:  # a follower: replicate until the bench ends this process by its PID
            time.sleep(1)
    value = b"v" * args.size
    runs = []
    for window in (int(w) for w in args.pso_windows.split(",")):
        runs.append(pysyncobj_throughput(store, value, args.entries, window))
    lat: list[float] = []
    for i in range(args.latency):
        t1 = time.perf_counter()
        store.put(f"k{i % 1000}", value, sync=True, timeout=10)
        lat.append(time.perf_counter() - t1)
    result = {"runs": runs, "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)}
    Path(args.pso_result).write_text(json.dumps(result))
    return 0


def bench_pysyncobj(args: argparse.Namespace, tmp: Path, ours: float | None) -> None:
    if not ensure_pysyncobj():
        return
    work = tmp / "pysyncobj"
    work.mkdir()
    peers = ",".join(f"127.0.0.1:{free_port()}" for _ in range(3))
    result = work / "result.json"
    # PySyncObj batches appends every appendEntriesPeriod (0.1 s), so its throughput grows with
    # the window: it also runs with 16 times ours, and its best run is the comparison.
    windows = [args.inflight, args.inflight * 16]
    latency = min(args.latency, 200)  # about 0.1 s each

    def argv(node: int) -> list[str]:
        flags = {
            "--pysyncobj-node": node,
            "--pso-peers": peers,
            "--pso-dir": work,
            "--pso-result": result,
            "--entries": args.entries,
            "--pso-windows": ",".join(str(w) for w in windows),
            "--latency": latency,
            "--size": args.size,
        }
        script = [sys.executable, str(Path(__file__).resolve())]
        return script + [text for flag, v in flags.items() for text in (flag, str(v))]

    nodes = [Daemon(f"pysyncobj-{i}", argv(i), work / f"node{i}.log") for i in range(3)]
    try:
        for node in nodes:
            node.start()
        print(
            f"PySyncObj: nodes pid {', '.join(str(n.pid) for n in nodes)} on {peers}; "
            f"journal files (PySyncObj has no fsync: its mmap journal is never flushed on the "
            f"write path); the leader's process puts through PySyncObj's API (no client hop)",
            flush=True,
        )
        wait_until(lambda: result.exists() or not all(n.alive() for n in nodes), "PySyncObj", 600)
        if not result.exists():
            logs = "\n".join(n.log()[-2000:] for n in nodes)
            print(f"PySyncObj: a node exited without a result:\n{logs}", flush=True)
            return
    finally:
        for node in nodes:
            node.stop()
    figures = json.loads(result.read_text())
    best = 0.0
    for run in figures["runs"]:
        rate = run["done"] / run["seconds"]
        best = max(best, rate)
        print(
            f"PySyncObj throughput ({run['inflight']} in flight): {run['done']:,} puts in "
            f"{run['seconds']:.2f} s = {rate:,.0f} ops/s, {rate * args.size / 1e6:.2f} MB/s "
            f"({run['failed']} failed{'' if run['finished'] else ', timed out'})",
            flush=True,
        )
        if ours is not None:
            print(
                f"  ratio rmq-py controller ({args.inflight} in flight) / this: {ours / rate:.2f}"
            )
    print(
        f"PySyncObj latency one at a time ({latency} puts): p50 {ms(figures['p50'])}  "
        f"p99 {ms(figures['p99'])}",
        flush=True,
    )
    if ours is not None and best:
        print(
            f"ratio rmq-py controller / PySyncObj's best (same run): {ours / best:.2f}", flush=True
        )


# --- main --------------------------------------------------------------------------------------


def run(main: Callable[[], Any]) -> Any:
    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--entries", type=int, default=20_000, help="entries of the throughput phase")
    p.add_argument("--inflight", type=int, default=256, help="proposals in flight")
    p.add_argument("--connections", type=int, default=4, help="client connections to the leader")
    p.add_argument(
        "--flood",
        type=int,
        default=4096,
        help="proposals in flight of the load-shedding phase (0: skip it)",
    )
    p.add_argument(
        "--max-inflight-proposals",
        type=int,
        default=ControllerConfig().max_inflight_proposals,
        help="the controllers' max_inflight_proposals (default: the config default)",
    )
    p.add_argument("--latency", type=int, default=2_000, help="writes of the latency phase")
    p.add_argument("--kills", type=int, default=20, help="rounds of kill -9 of the leader")
    p.add_argument("--size", type=int, default=1024, help="bytes of one Raft entry")
    p.add_argument(
        "--only", choices=("controller", "pysyncobj"), help="run one side (default: both)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    p.add_argument("--pysyncobj-node", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--pso-peers", default="", help=argparse.SUPPRESS)
    p.add_argument("--pso-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--pso-result", default="", help=argparse.SUPPRESS)
    p.add_argument("--pso-windows", default="", help=argparse.SUPPRESS)
    return smoke.parse_args(
        p,
        entries=300,
        inflight=64,
        connections=2,
        flood=300,
        latency=50,
        kills=1,
        only="controller",
    )


def main() -> int:
    args = parse_args()
    if args.pysyncobj_node is not None:
        return pysyncobj_node(args)
    # SIGTERM unwinds like Ctrl-C, so the finally blocks end every process by its PID.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tmp = tempfile.mkdtemp(prefix="rmq-controller-bench-")
    try:
        ours = None
        if args.only != "pysyncobj":
            ours = run(lambda: bench_controller(args, Path(tmp)))
        if args.only != "controller":
            bench_pysyncobj(args, Path(tmp), ours)
    finally:
        if args.keep:
            print(f"kept {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
