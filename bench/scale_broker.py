"""How a broker group's costs grow with its queues and consumer groups (issue 34 item 2).

One column per load factor of bench/scale_bench.py: 1x = ``--broker-queues`` queues (topics of 8
queues) and ``--broker-groups`` consumer groups; 10x ten times both; the 100x column is the
issue's 50,000 queues (50x) and 10,000 groups (100x). Each column starts a fresh cluster of real
processes (tests/support/cluster.py: three ``rmq-controller`` and ``broker-a``, a master and a
slave, all-ack) and drives it through the real requests:

  topic creation        UPDATE_AND_CREATE_TOPIC on the master (it commits the topic with the
                        controllers, then stores it), 16 in flight: ms per topic
  first put in a queue  SEND_MESSAGE, 64 in flight, one connection, ``--body`` bytes, one to
                        every queue (each creates its ConsumeQueue's first file): microseconds of
                        wall time per message (1 / throughput)
  put                   then ``--puts`` more over every queue in turn: the same
  idle, master/slave CPU before them, the slave caught up, ``--idle-s`` seconds without a
                        request: the master's and the slave's CPU time a second (ms/s), their
                        periodic work (heartbeats, the slave's copy of the master's tables,
                        route registration, the traffic report, flushes, offset persists);
                        it should not grow with the queues
  put, master/slave CPU the master's and the slave's CPU time over those puts (their CPU-time
                        clocks, in nanoseconds), microseconds a message (less swayed by the
                        machine's load than the wall time); ``--rounds`` rounds of ``--puts``,
                        the median round. "- idle": the same less the idle CPU a second times
                        the round's seconds (the periodic work a round of a second or two
                        carries, or not, made the rows swing by a third between runs); also
                        printed, not in the table: each round's minor faults a message and the
                        system CPU over the rounds (/proc/<pid>/stat), where a put's kernel
                        work shows (the pages it dirties)
  pull, master CPU      then as many PULLs of one message (queue offset 0, 64 in flight) over
                        the last PULL_QUEUES queues (1,000; every queue at 1x), each as often
                        in every column (at 10x and 100x the queues whose ConsumeQueue
                        segments the puts did not leave mapped): the master's CPU time,
                        microseconds a message, the median of ``--rounds`` rounds, and less idle
  offset commit         UPDATE_CONSUMER_OFFSET of every group on the 8 queues of one topic
                        (group g on topic g mod topics), 64 in flight, in rounds over all the
                        groups for ``--commit-seconds`` (6 s) in every column: p99 of them all
                        (one round of 800 commits at 1x lasted 25 ms and one of 8,000 at 10x
                        0.25 s, so the 10x phase was ten times as likely to meet any of the
                        broker's periodic work, which runs every 1 to 5 s)
  master RSS, open fds  /proc/<pid>/status VmRSS and /proc/<pid>/fd of the master, loaded
  ConsumeQueue files    the master's files under consumequeue/
  consumer offsets file the master's config/consumerOffset.json once persisted
  startup clean/kill -9 the slave stopped by SIGTERM (then by SIGKILL), started again: seconds
                        until it answers GET_MAX_OFFSET of the last queue with the master's figure
  slave catch-up        a third replica with an empty disk joins: seconds until its CommitLog
                        and the last queue's max offset are the master's

The brokers keep ConsumeQueue segments of ``--cq-entries`` entries (not the production 300,000:
50,000 queues of 6 MB files each were 300 GB a replica while they were allocated in full;
sparse now, 64 KiB of blocks a queue of a few messages; said in docs/architecture.md). ``--log-gib N`` adds the log-size part (:mod:`bench.scale_log`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from bench.broker_bench import cpu_seconds
from bench.figures import faults_and_system
from bench.growth import PER_OP, Measure, Worst, print_growth
from bench.growth import rss_mib as rss_mib  # bench/scale_clients.py takes it from here
from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from protocol.pull import ConsumerOffsetUpdate, MaxOffsetQuery
from protocol.remoting import Header
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.cluster.support import epoch_cache, full_sync_state_set, group_masters, node_at
from tests.support.cluster import BrokerNode, Cluster
from tests.support.procs import port_open

QUEUES = 8
QUEUES_LOAD = "queues"
GROUPS_LOAD = "groups"
TOPIC_INFLIGHT = 16
INFLIGHT = 64
PULL_QUEUES = 1000
"""The pulls go to this many queues (the last ones) in every column, each as often: a column
that pulled every queue in turn pulled each of 1,000 queues 5 times at 1x and 5,000 of 10,000
once at 10x, so it compared pulls of queues read just before with first reads."""
SEGMENT_BYTES = 64 << 20

MEASURES: tuple[Measure, ...] = (
    ("topic creation", "ms", PER_OP),
    ("first put in a queue", "us/msg", PER_OP),
    ("put", "us/msg", PER_OP),
    ("idle, master CPU", "ms/s", PER_OP),
    ("idle, slave CPU", "ms/s", PER_OP),
    ("put, master CPU", "us/msg", PER_OP),
    ("put, master CPU - idle", "us/msg", PER_OP),
    ("put, slave CPU", "us/msg", PER_OP),
    ("put, slave CPU - idle", "us/msg", PER_OP),
    ("pull, master CPU", "us/msg", PER_OP),
    ("pull, master CPU - idle", "us/msg", PER_OP),
    ("offset commit p99", "ms", PER_OP),
    ("master RSS", "MiB", QUEUES_LOAD),
    ("master open fds", "fds", QUEUES_LOAD),
    ("ConsumeQueue files", "files", QUEUES_LOAD),
    ("consumer offsets file", "KiB", GROUPS_LOAD),
    ("startup after clean stop", "s", QUEUES_LOAD),
    ("startup after kill -9", "s", QUEUES_LOAD),
    ("slave catch-up", "s", QUEUES_LOAD),
)


MASTER_CHANGES = "master changes"
"""Not a cost: how often the master lost its role during a column (the loaded machine)."""


LATE_ACKS = "puts the slave acked late"
"""Not a cost: puts answered FLUSH_SLAVE_TIMEOUT (stored on the master, the slave behind)."""


@dataclass
class BrokerColumn:
    factor: int
    queues: int
    groups: int
    figures: dict[str, float] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds each step of the column took (printed: where a run's time goes)."""
    began: float = 0.0
    """When the step under way began."""

    def step(self, name: str) -> None:
        """The step named ``name`` ended now (it began where the last one ended)."""
        now = time.perf_counter()
        self.phases[name] = now - self.began
        self.began = now

    @property
    def topics(self) -> int:
        return self.queues // QUEUES

    @property
    def loads(self) -> dict[str, float]:
        return {QUEUES_LOAD: self.queues, GROUPS_LOAD: self.groups}


def columns(factors: list[int], queues: int, groups: int) -> list[BrokerColumn]:
    """The issue's sizes: queues 1k, 10k, 50k (the 100x column's queues are 50x) and consumer
    groups 100, 1k, 10k."""
    return [BrokerColumn(f, queues * min(f, 50), groups * f) for f in factors]


def topic_name(i: int) -> str:
    return f"ScaleQ{i:05d}"


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def in_flight(n: int, inflight: int, one: Callable[[int], Awaitable[None]]) -> list[float]:
    """Run ``one(i)`` for i in range(n), ``inflight`` at once: each one's seconds."""
    took: list[float] = []
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            await one(i)
            took.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(inflight)))
    return took


class Master:
    """The group's master and one connection to it; another one once the controllers elect
    another (a master held past its lease on the loaded machine loses its role: counted)."""

    def __init__(self, boot: Bootstrap, cluster: Cluster) -> None:
        self.boot = boot
        self.cluster = cluster
        self.node: BrokerNode | None = None
        self.conn: RemotingClient | None = None
        self.changes = 0
        self.late_acks = 0
        """Puts the master stored but the slave did not acknowledge in time (FLUSH_SLAVE_TIMEOUT:
        the slave behind on the loaded machine)."""
        self._lock = asyncio.Lock()

    async def connect(self, in_sync: bool = True) -> RemotingClient:
        """Connect to the master, once both replicas are in sync (``in_sync``) or once there
        is one."""
        if in_sync:
            doc = await full_sync_state_set(self.boot, self.cluster, size=2, timeout=120)
            address = doc["masterAddress"]
        else:
            address = (await group_masters(self.boot, self.cluster, "broker-a"))["broker-a"]
        self.node = node_at(self.cluster, address)
        self.conn = await RemotingClient.connect(self.node.address, 5.0)
        return self.conn

    async def call(self, code: int, header: Header, body: bytes | None = None) -> None:
        """One request, again on the new master while this one answers that it is none."""
        for _ in range(20):
            conn = self.conn
            assert conn is not None
            try:
                resp = await conn.request(code, header, body, 60.0)
            except (RemotingError, OSError):
                resp = None
            if resp is not None and resp.code == ResponseCode.SUCCESS:
                return
            if resp is not None and resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT:
                self.late_acks += 1  # stored on the master: not sent again
                return
            if resp is not None and resp.code not in _NOT_MASTER:
                raise RuntimeError(f"request {code} failed: {resp.code} {resp.header}")
            async with self._lock:
                if self.conn is conn:  # the first worker to see it finds the new master
                    conn.close()
                    self.changes += 1
                    await asyncio.sleep(1.0)
                    await self.connect(in_sync=False)
        raise RuntimeError(f"request {code}: no master took it in 20 tries")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


_NOT_MASTER = frozenset(
    {
        ResponseCode.NOT_MASTER,
        ResponseCode.MASTER_FENCED,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.SERVICE_NOT_AVAILABLE,
    }
)


async def create_topics(master: Master, col: BrokerColumn) -> float:
    """Every topic through UPDATE_AND_CREATE_TOPIC on the master; seconds in all."""

    async def one(i: int) -> None:
        header: Header = {"topic": topic_name(i), "queues": QUEUES}
        await master.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)

    t0 = time.perf_counter()
    await in_flight(col.topics, TOPIC_INFLIGHT, one)
    return time.perf_counter() - t0


async def put_all(master: Master, col: BrokerColumn, puts: int, body: bytes) -> float:
    """``puts`` messages over every queue in turn; seconds in all."""

    async def one(i: int) -> None:
        q = i % col.queues
        header: Header = {"topic": topic_name(q // QUEUES), "queueId": q % QUEUES}
        await master.call(RequestCode.SEND_MESSAGE, header, body)

    t0 = time.perf_counter()
    await in_flight(puts, INFLIGHT, one)
    return time.perf_counter() - t0


async def pull_all(master: Master, col: BrokerColumn, pulls: int) -> float:
    """``pulls`` PULLs of one message at queue offset 0, over the last :data:`PULL_QUEUES`
    queues in turn from the last one back; seconds in all."""
    spread = min(col.queues, PULL_QUEUES)

    async def one(i: int) -> None:
        q = col.queues - 1 - i % spread
        header: Header = {
            "consumerGroup": "scale-pull",
            "topic": topic_name(q // QUEUES),
            "queueId": q % QUEUES,
            "queueOffset": 0,
            "maxMsgNums": 1,
            "suspendTimeoutMillis": 0,
        }
        await master.call(RequestCode.PULL_MESSAGE, header)

    t0 = time.perf_counter()
    await in_flight(pulls, INFLIGHT, one)
    return time.perf_counter() - t0


async def commit_offsets(master: Master, col: BrokerColumn, seconds: float) -> list[float]:
    """Every group commits its offset on the 8 queues of one topic, in rounds (round r commits
    offset r + 1), for at least ``seconds`` and one round: each commit's seconds."""
    per_round = col.groups * QUEUES
    took: list[float] = []
    counter = itertools.count()
    ends = time.perf_counter() + seconds

    async def worker() -> None:
        for i in counter:
            if i >= per_round and time.perf_counter() >= ends:
                return
            r, k = divmod(i, per_round)
            g, q = divmod(k, QUEUES)
            ask = ConsumerOffsetUpdate(
                group=f"scale-group-{g:05d}",
                topic=topic_name(g % col.topics),
                queue_id=q,
                offset=r + 1,
            )
            t0 = time.perf_counter()
            await master.call(ask.code, *ask.encode())
            took.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(INFLIGHT)))
    return took


async def max_offset(address: str, topic: str, queue_id: int) -> int | None:
    """GET_MAX_OFFSET of one queue on ``address``; None while it does not answer."""
    try:
        conn = await RemotingClient.connect(address, 1.0)
    except OSError:
        return None
    try:
        ask = MaxOffsetQuery(topic=topic, queue_id=queue_id)
        resp = await conn.request(ask.code, *ask.encode(), 2.0)
        return int(str(resp.header["offset"])) if resp.code == ResponseCode.SUCCESS else None
    except Exception:
        return None
    finally:
        conn.close()


async def answers(node: BrokerNode, col: BrokerColumn, want: int, timeout: float) -> float:
    """Seconds from now until ``node`` answers the last queue's max offset as ``want``."""
    t0 = time.perf_counter()
    last = col.queues - 1
    while True:
        if not node.alive():
            raise RuntimeError(f"{node.name} exited:\n{node.log()[-2000:]}")
        if port_open(node.port) and (
            await max_offset(node.address, topic_name(last // QUEUES), last % QUEUES) == want
        ):
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{node.name} did not answer {want} in {timeout:.0f} s")
        await asyncio.sleep(0.02)


async def caught_up(node: BrokerNode, master: str, timeout: float) -> None:
    """Until ``node``'s CommitLog ends where the master's does."""
    want = int((await epoch_cache(master))["maxOffset"])
    deadline = time.perf_counter() + timeout
    while True:
        try:
            if int((await epoch_cache(node.address))["maxOffset"]) >= want:
                return
        except Exception:
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{node.name} did not catch up in {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def idle_cpu(pids: list[int], seconds: float) -> dict[int, float]:
    """Each process's CPU time a second over ``seconds`` with no request sent to it."""
    before = {pid: cpu_seconds(pid) for pid in pids}
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    took = time.perf_counter() - t0
    return {pid: (cpu_seconds(pid) - before[pid]) / took for pid in pids}


def broker_toml(cq_entries: int, offsets_persist_ms: int = 0) -> str:
    """The brokers' TOML: ConsumeQueue segments of ``cq_entries``; with ``offsets_persist_ms``
    the consumer offsets persisted that often (0: the broker's default, 5 s)."""
    toml = f"consumequeue_segment_entries = {cq_entries}\n"
    if offsets_persist_ms:
        toml += f"consumer_offset_persist_interval_ms = {offsets_persist_ms}\n"
    return toml


async def measure(col: BrokerColumn, args: argparse.Namespace, tmp: Path) -> None:
    f = col.figures
    col.began = time.perf_counter()
    cluster = Cluster(tmp)
    boot: Bootstrap | None = None
    target: Master | None = None
    config = broker_toml(args.cq_entries, args.offsets_persist_ms)
    try:
        cluster.start_controllers()
        boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
        cluster.add_group("broker-a", 2, config=config, segment_bytes=SEGMENT_BYTES)
        target = Master(boot, cluster)
        await target.connect()
        col.step("cluster start")
        created = await create_topics(target, col)
        col.step("topics")
        f["topic creation"] = created / col.topics * 1000
        body = os.urandom(args.body // 2).hex().encode()
        first = await put_all(target, col, col.queues, body)
        f["first put in a queue"] = first / col.queues * 1e6
        col.step("first puts")
        puts = args.puts
        pids = [b.pid for b in cluster.brokers]
        master_pid = target.node.pid if target.node is not None else -1
        master_node = target.node
        assert master_node is not None
        for node in cluster.brokers:
            if node is not master_node:
                await caught_up(node, master_node.address, 120)
        idle = await idle_cpu(pids, args.idle_s)
        if target.node is not None and target.node.pid == master_pid:
            f["idle, master CPU"] = idle[master_pid] * 1000
            f["idle, slave CPU"] = sum(v for pid, v in idle.items() if pid != master_pid) * 1000
        col.step("idle")
        rounds: list[tuple[float, float, float, float, float]] = []
        # Each round's minor faults and system CPU seconds, the master's then the slave's.
        kernel: list[tuple[int, float, int, float]] = []
        for _ in range(args.rounds):
            master_pid = target.node.pid if target.node is not None else -1
            cpu = {pid: cpu_seconds(pid) for pid in pids}
            counts = {pid: faults_and_system(pid) for pid in pids}
            took = await put_all(target, col, puts, body)
            cpu = {pid: cpu_seconds(pid) - cpu[pid] for pid in pids}
            counts = {
                pid: (after[0] - counts[pid][0], after[1] - counts[pid][1])
                for pid, after in ((pid, faults_and_system(pid)) for pid in pids)
            }
            if target.node is None or target.node.pid != master_pid:
                continue  # a master change: not a round of this master's
            others = [v for pid, v in counts.items() if pid != master_pid]
            kernel.append(
                (
                    *counts[master_pid],
                    sum(v[0] for v in others),
                    sum(v[1] for v in others),
                )
            )
            m = cpu[master_pid]
            sl = sum(v for pid, v in cpu.items() if pid != master_pid)
            m_idle = idle.get(master_pid, 0.0)
            s_idle = sum(v for pid, v in idle.items() if pid != master_pid)
            rounds.append((took, m, m - m_idle * took, sl, sl - s_idle * took))
        if rounds:
            f["put"] = median(r[0] for r in rounds) / puts * 1e6
            for i, name in enumerate(
                ("put, master CPU", "put, master CPU - idle", "put, slave CPU"), 1
            ):
                f[name] = median(r[i] for r in rounds) / puts * 1e6
            f["put, slave CPU - idle"] = median(r[4] for r in rounds) / puts * 1e6
        col.step("puts")
        pulls: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            master_pid = target.node.pid if target.node is not None else -1
            before = cpu_seconds(master_pid)
            took = await pull_all(target, col, puts)
            if target.node is not None and target.node.pid == master_pid:
                used = cpu_seconds(master_pid) - before
                pulls.append((used, used - idle.get(master_pid, 0.0) * took))
        if pulls:
            f["pull, master CPU"] = median(p[0] for p in pulls) / puts * 1e6
            f["pull, master CPU - idle"] = median(p[1] for p in pulls) / puts * 1e6
        col.step("pulls")
        print(  # the rounds the medians are of: how much they swing within a run
            f"  {col.factor}x rounds (us/msg): put, master CPU "
            + " ".join(f"{r[1] / puts * 1e6:.1f}" for r in rounds)
            + "; put, slave CPU "
            + " ".join(f"{r[3] / puts * 1e6:.1f}" for r in rounds)
            + "; pull, master CPU "
            + " ".join(f"{p[0] / puts * 1e6:.1f}" for p in pulls)
            + "; put round seconds "
            + " ".join(f"{r[0]:.2f}" for r in rounds),
            flush=True,
        )
        if kernel:  # where a put's system CPU goes: the pages it dirties (docs/architecture.md)
            done = puts * len(kernel)
            print(
                f"  {col.factor}x put rounds, minor faults a message: master "
                + " ".join(f"{k[0] / puts:.2f}" for k in kernel)
                + "; slave "
                + " ".join(f"{k[2] / puts:.2f}" for k in kernel)
                + "; system CPU over the rounds (us/msg, in 10 ms ticks): master "
                + f"{sum(k[1] for k in kernel) / done * 1e6:.1f}, slave "
                + f"{sum(k[3] for k in kernel) / done * 1e6:.1f}",
                flush=True,
            )
        commits = sorted(await commit_offsets(target, col, args.commit_seconds))
        col.step("offset commits")
        await target.connect()  # both in sync again, whichever is master now
        master = target.node
        assert master is not None
        slave = next(b for b in cluster.brokers if b is not master)
        f[MASTER_CHANGES] = target.changes
        f[LATE_ACKS] = target.late_acks
        f["offset commit p99"] = commits[int(0.99 * (len(commits) - 1))] * 1000
        offsets_file = master.data_dir / "config" / "consumerOffset.json"
        last_group = f"scale-group-{col.groups - 1:05d}".encode()
        deadline = time.perf_counter() + 60  # persisted on its own interval: wait for it
        while time.perf_counter() < deadline and not (
            offsets_file.exists() and last_group in offsets_file.read_bytes()
        ):
            await asyncio.sleep(0.2)
        f["consumer offsets file"] = (
            offsets_file.stat().st_size / 1024 if offsets_file.exists() else float("nan")
        )
        col.step("offsets file")
        f["master RSS"] = rss_mib(master.pid)
        f["master open fds"] = open_fds(master.pid)
        f["ConsumeQueue files"] = sum(
            1 for p in (master.data_dir / "consumequeue").rglob("*") if p.is_file()
        )
        print(
            f"  {col.factor}x: {col.topics:,} topics in {created:.1f} s, {col.queues:,} first "
            f"puts at {col.queues / first:,.0f} msg/s, {args.rounds} x {puts:,} puts at "
            f"{1e6 / f.get('put', float('nan')):,.0f} msg/s (the median round), "
            f"{len(commits):,} offset commits",
            flush=True,
        )
        last = col.queues - 1
        want = await max_offset(master.address, topic_name(last // QUEUES), last % QUEUES)
        assert want is not None and want > 0, want
        await caught_up(slave, master.address, 120)
        await answers(slave, col, want, 120)
        col.step("slave in step")
        # A clean stop flushes what the slave has not yet: waited for (SIGKILL only past 300 s),
        # or the start after it would be one after kill -9.
        code = slave.stop(timeout=300)
        col.step("slave clean stop")
        if code != 0:
            print(f"  {col.factor}x: the slave's stop was not clean (exit {code})", flush=True)
        slave.start()
        f["startup after clean stop"] = await answers(slave, col, want, 300)
        col.step("clean restart")
        slave.kill9()
        slave.start()
        f["startup after kill -9"] = await answers(slave, col, want, 300)
        col.step("kill -9 restart")
        third = BrokerNode(
            tmp, "broker-a", 2, cluster.controller_addresses, [], config,
            segment_bytes=SEGMENT_BYTES,
        )  # fmt: skip
        cluster.brokers.append(third)
        t0 = time.perf_counter()
        third.start()
        await caught_up(third, master.address, 600)
        await answers(third, col, want, 600)
        f["slave catch-up"] = time.perf_counter() - t0
        col.step("catch-up")
        print(f"  {col.factor}x figures: " + ", ".join(f"{k} {v:,.2f}" for k, v in f.items()))
    except Exception:
        if args.logs:
            kept = Path(args.logs) / f"{col.factor}x"
            kept.mkdir(parents=True, exist_ok=True)
            for log_file in tmp.glob("*.log"):
                shutil.copy(log_file, kept / log_file.name)
        raise
    finally:
        if target is not None:
            target.close()
        if boot is not None:
            boot.close()
        for node in cluster.brokers:  # the column's data goes: no clean stop (15 s at 10x)
            node.kill9()
        cluster.stop()  # every process by its PID, also on error
        col.step("cluster stop")
        print(
            f"  {col.factor}x took {sum(col.phases.values()):.0f} s: "
            + ", ".join(f"{k} {v:.1f}" for k, v in col.phases.items()),
            flush=True,
        )


async def run_columns(cols: list[BrokerColumn], args: argparse.Namespace) -> None:
    for col in cols:
        tmp = Path(tempfile.mkdtemp(prefix=f"scale-broker-{col.factor}x-"))
        try:
            print(
                f"brokers {col.factor}x: {col.queues:,} queues ({col.topics:,} topics), "
                f"{col.groups:,} consumer groups",
                flush=True,
            )
            try:
                await measure(col, args, tmp)
            except (RuntimeError, AssertionError) as exc:  # its figures stay empty
                print(f"  {col.factor}x: {exc}", flush=True)
        finally:
            t0 = time.perf_counter()
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"  {col.factor}x: its files removed in {time.perf_counter() - t0:.1f} s")


def print_table(cols: list[BrokerColumn]) -> Worst:
    """The brokers' growth table; returns its worst ratio."""
    print()
    print(
        "brokers: "
        + ", ".join(f"{c.factor}x = {c.queues:,} queues, {c.groups:,} groups" for c in cols)
        + " (load x: queues for the totals, consumer groups for the offsets file)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine)")
    worst = print_growth(
        MEASURES, [c.factor for c in cols], [c.figures for c in cols], [c.loads for c in cols]
    )
    for name in (MASTER_CHANGES, LATE_ACKS):
        print(f"{name:30s}" + "".join(f"{c.figures.get(name, float('nan')):12,.0f}" for c in cols))
    return worst


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker-queues", type=int, default=1000, help="queues at 1x")
    parser.add_argument("--broker-groups", type=int, default=100, help="consumer groups at 1x")
    parser.add_argument(
        "--puts", type=int, default=5000, help="puts (and pulls) a round, per column"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of --puts puts, then of as many pulls: the CPU rows give the median round",
    )
    parser.add_argument(
        "--idle-s",
        type=float,
        default=10.0,
        help="seconds the brokers' idle CPU is read over, before the puts",
    )
    parser.add_argument("--body", type=int, default=256, help="message body bytes")
    parser.add_argument("--logs", default="", help="keep a failed column's logs in this directory")
    parser.add_argument(
        "--cq-entries", type=int, default=1024, help="ConsumeQueue segment entries (20 B each)"
    )
    parser.add_argument(
        "--commit-seconds",
        type=float,
        default=6.0,
        help="offset commits go on this long in every column (past the offsets' 5 s persist "
        "interval; at least one round over every group)",
    )
    parser.add_argument(
        "--offsets-persist-ms",
        type=int,
        default=0,
        help="the brokers' consumer_offset_persist_interval_ms (0: their default, 5 s); the "
        "consumer offsets file is read once persisted",
    )
