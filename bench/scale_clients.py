"""How the brokers' and controllers' costs grow with the clients (issue 34 item 3).

One column per load factor of bench/scale_bench.py: 1x = ``--clients`` client connections (200:
the 100x column is the issue's 20,000) and a consumer group of ``--members`` members (10: 1,000
at 100x). Each column starts a fresh cluster of real processes (tests/support/cluster.py: three
``rmq-controller`` and ``--client-brokers`` broker groups of one broker each) and, in this
process, one coroutine per client with its own connection (remoting.client.RemotingClient, the
SDK's) speaking the real requests, spread over the brokers: half are consumers (HEART_BEAT of
their group every second, the SDK's ``heartbeat_interval``), half producers (SEND_MESSAGE of one
message every second); every client looks its topic up on the controllers once at start and
then every ``--route-refresh`` seconds (GET_ROUTEINFO_BY_TOPIC).

Measured per column:
  memory per connection   the brokers' VmRSS with every client connected and heart-beaten once,
                          less it before any, over the clients: KiB
  open fds per connection the same of /proc/<pid>/fd (the limit: see below)
  broker CPU per request  the brokers' utime+stime over ``--window`` seconds of the clients'
                          one request a second each, over the requests answered: us
  requests answered       of those due in the window (1.0: every client kept its one a second)
  controller CPU/client   the three controllers' CPU over the window (their CPU before any
                          client taken off) per client and second: us (route refreshes)
  rebalance round         a group of ``members`` consumers, one joins: from its heartbeat until
                          every member has done what the SDK's tick does (HEART_BEAT,
                          GET_CONSUMER_LIST_BY_GROUP until the list has the newcomer,
                          allocate_averagely over the topic's queues), all at once: ms
  member list fetch       that round over the members: per member, ms
  close per connection    every client connection closed at once: the brokers' CPU until
                          they have that many sockets fewer open, per
                          connection: us

The open-files limit is raised to its hard limit here (resource.setrlimit; the brokers started
after inherit it) and printed: each client is a socket in this process and one in a broker, so a
column holds at most the limit less 200 connections (said when it is cut; the rebalance round
runs after the clients closed).
Nothing is asserted: figures on a shared machine (the load average is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.controller_bench import process_cpu
from bench.growth import PER_OP, Measure, Worst, print_growth, rss_mib
from bench.scale_broker import open_fds
from client.allocate import allocate_averagely
from client.bootstrap import Bootstrap
from client.identity import heartbeat
from protocol.broker_requests.clients import ConsumerList, ConsumerListQuery
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.remoting import Header
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.cluster.support import sync_state
from tests.support.cluster import BrokerNode, Cluster
from tests.support.wait import wait_until_async

TOPIC = "ScaleClients"
QUEUES = 8
CONNECT_INFLIGHT = 200
CLIENTS_LOAD = "clients"
MEMBERS_LOAD = "members"
REBALANCE_GROUP = "scale-rebalance"
FD_MARGIN = 200
"""Descriptors this process keeps for itself beside the clients' (controllers, files, logs)."""

MEASURES: tuple[Measure, ...] = (
    ("memory per connection", "KiB", PER_OP),
    ("open fds per connection", "fds", PER_OP),
    ("broker CPU per request", "us", PER_OP),
    ("requests answered", "share", PER_OP),
    ("controller CPU per client", "us/s", PER_OP),
    ("rebalance round", "ms", MEMBERS_LOAD),
    ("member list fetch", "ms", PER_OP),
    ("close per connection", "us", PER_OP),
)


@dataclass
class ClientColumn:
    factor: int
    clients: int
    members: int
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def loads(self) -> dict[str, float]:
        return {CLIENTS_LOAD: self.clients, MEMBERS_LOAD: self.members}


def columns(factors: list[int], clients: int, members: int) -> list[ClientColumn]:
    return [ClientColumn(f, clients * f, members * f) for f in factors]


def raise_open_files() -> tuple[int, int]:
    """The soft open-files limit raised to the hard one; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def group_name(g: int) -> str:
    return f"clients-{g}"


class Client:
    """One simulated SDK client: its connection to one broker, its role, its counts."""

    def __init__(self, i: int, broker: BrokerNode) -> None:
        self.i = i
        self.broker = broker
        self.consumer = i % 2 == 0
        self.client_id = f"scale-client-{i:05d}"
        self.conn: RemotingClient | None = None
        self.answered = 0

    def beat(self) -> Header:
        if self.consumer:
            return heartbeat(f"scale-cg-{self.i % 50:02d}", self.client_id, topic=TOPIC)
        return heartbeat(f"scale-pg-{self.i % 50:02d}", self.client_id, producer=True)

    async def connect(self) -> None:
        self.conn = await RemotingClient.connect(self.broker.address, 10.0)
        resp = await self.conn.request(RequestCode.HEART_BEAT, self.beat(), None, 30.0)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"heartbeat refused: {resp.code} {resp.header}")

    async def one_request(self, body: bytes) -> None:
        """What the client does each second: a consumer's heartbeat, a producer's send."""
        assert self.conn is not None
        if self.consumer:
            resp = await self.conn.request(RequestCode.HEART_BEAT, self.beat(), None, 30.0)
        else:
            header: Header = {"topic": TOPIC, "queueId": self.i % QUEUES}
            resp = await self.conn.request(RequestCode.SEND_MESSAGE, header, body, 30.0)
        if resp.code == ResponseCode.SUCCESS:
            self.answered += 1


async def route_lookups(boot: Bootstrap, clients: list[Client], every: float) -> None:
    """Each client's route refresh: one lookup per client per ``every`` seconds, spread."""
    ask = RouteQuery(topic=TOPIC)
    while True:
        for _ in clients:
            await asyncio.sleep(every / max(len(clients), 1))
            try:
                await boot.call(ask.code, *ask.encode())
            except Exception:  # a controller election: the next refresh tries again
                pass


async def active(clients: list[Client], seconds: float, body: bytes) -> None:
    """Every client's one request a second for ``seconds``, each at its own phase."""

    async def run(c: Client) -> None:
        await asyncio.sleep(random.random())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                await c.one_request(body)
            except Exception:  # late past its timeout: not answered
                pass
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))

    await asyncio.gather(*(run(c) for c in clients))


async def rebalance_round(address: str, members: int) -> tuple[float, int]:
    """A group of ``members`` consumers on one broker, one more joins: seconds until every
    member has the newcomer in its list and its queues allocated; and the members who did."""
    conns = [await RemotingClient.connect(address, 10.0) for _ in range(members + 1)]
    ids = [f"rebalance-{i:05d}" for i in range(members + 1)]
    queues = [f"{TOPIC}@{q}" for q in range(QUEUES)]
    query = ConsumerListQuery(group=REBALANCE_GROUP)
    try:
        for conn, cid in zip(conns[:-1], ids[:-1], strict=True):
            await conn.request(RequestCode.HEART_BEAT, heartbeat(REBALANCE_GROUP, cid, topic=TOPIC))
        newcomer = ids[-1]

        async def tick(conn: RemotingClient, cid: str) -> bool:
            for _ in range(50):
                beat = heartbeat(REBALANCE_GROUP, cid, topic=TOPIC)
                await conn.request(RequestCode.HEART_BEAT, beat, None, 60.0)
                resp = await conn.request(query.code, *query.encode(), timeout=60.0)
                listed = ConsumerList.parse(resp.header, resp.body).client_ids
                if newcomer in listed:
                    allocate_averagely(queues, sorted(listed), cid)
                    return True
            return False

        t0 = time.perf_counter()
        beat = heartbeat(REBALANCE_GROUP, newcomer, topic=TOPIC)
        await conns[-1].request(RequestCode.HEART_BEAT, beat, None, 60.0)
        done = await asyncio.gather(*(tick(c, cid) for c, cid in zip(conns, ids, strict=True)))
        return time.perf_counter() - t0, sum(done)
    finally:
        for conn in conns:
            conn.close()


def sockets(pid: int) -> int:
    """The process's open sockets (its listeners and connections)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            count += os.readlink(fd_dir / fd).startswith("socket:")
        except FileNotFoundError:  # closed meanwhile
            pass
    return count


def broker_cpu(brokers: list[BrokerNode]) -> float:
    return sum(process_cpu(b.pid) for b in brokers)


async def masters(boot: Bootstrap, names: list[str]) -> None:
    for name in names:

        async def elected(name: str = name) -> bool:
            doc = await sync_state(boot, name)
            return bool(doc and doc.get("masterAddress"))

        await wait_until_async(elected, f"a master of {name}", 120, interval=0.2)


async def measure(col: ClientColumn, args: argparse.Namespace, tmp: Path) -> None:
    f = col.figures
    cluster = Cluster(tmp)
    boot: Bootstrap | None = None
    clients: list[Client] = []
    routes: asyncio.Task[None] | None = None
    try:
        cluster.start_controllers()
        boot = Bootstrap(cluster.controller_addresses, timeout=5.0)
        names = [group_name(g) for g in range(args.client_brokers)]
        brokers = [cluster.add_group(name, 1)[0] for name in names]
        await masters(boot, names)
        for b in brokers:
            conn = await RemotingClient.connect(b.address, 10.0)
            try:
                header: Header = {"topic": TOPIC, "queues": QUEUES}
                resp = await conn.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header, None, 30.0)
                assert resp.code == ResponseCode.SUCCESS, resp.header
            finally:
                conn.close()
        await asyncio.sleep(args.settle)  # the brokers settle after their start
        ctl = [c.pid for c in cluster.controllers]
        rss0 = sum(rss_mib(b.pid) for b in brokers)
        fds0 = sum(open_fds(b.pid) for b in brokers)
        c0, t0 = sum(process_cpu(p) for p in ctl), time.perf_counter()
        await asyncio.sleep(args.window / 2)
        ctl_idle = (sum(process_cpu(p) for p in ctl) - c0) / (time.perf_counter() - t0)

        clients = [Client(i, brokers[i % len(brokers)]) for i in range(col.clients)]
        if col.clients > args.max_clients:  # this process's open-files limit
            print(f"  clients {col.factor}x: {args.max_clients:,} of {col.clients:,}", flush=True)
            col.clients = args.max_clients
            del clients[col.clients :]
        sem = asyncio.Semaphore(CONNECT_INFLIGHT)

        async def connect(c: Client) -> None:
            async with sem:
                await c.connect()

        t0 = time.perf_counter()
        await asyncio.gather(*(connect(c) for c in clients))
        connected = time.perf_counter() - t0
        await asyncio.sleep(args.settle)
        f["memory per connection"] = (
            (sum(rss_mib(b.pid) for b in brokers) - rss0) * 1024 / col.clients
        )
        f["open fds per connection"] = (sum(open_fds(b.pid) for b in brokers) - fds0) / col.clients

        routes = asyncio.create_task(route_lookups(boot, clients, args.route_refresh))
        body = os.urandom(64).hex().encode()
        cpu0 = broker_cpu(brokers)
        c0, t0 = sum(process_cpu(p) for p in ctl), time.perf_counter()
        await active(clients, args.window, body)
        took = time.perf_counter() - t0
        answered = sum(c.answered for c in clients)
        f["broker CPU per request"] = (broker_cpu(brokers) - cpu0) / max(answered, 1) * 1e6
        f["requests answered"] = answered / (col.clients * args.window)
        ctl_cpu = sum(process_cpu(p) for p in ctl) - c0 - ctl_idle * took
        f["controller CPU per client"] = max(ctl_cpu, 0.0) / col.clients / took * 1e6
        routes.cancel()

        open_now = sum(sockets(b.pid) for b in brokers)
        cpu0 = broker_cpu(brokers)
        for c in clients:
            if c.conn is not None:
                c.conn.close()

        async def closed() -> bool:
            return sum(sockets(b.pid) for b in brokers) <= open_now - col.clients

        await wait_until_async(closed, "the brokers to close every client connection", 120)
        f["close per connection"] = (broker_cpu(brokers) - cpu0) / col.clients * 1e6
        clients = []
        round_s, done = await rebalance_round(brokers[0].address, col.members)
        f["rebalance round"] = round_s * 1000
        f["member list fetch"] = round_s * 1000 / (col.members + 1)
        print(
            f"  clients {col.factor}x: {col.clients:,} connected in {connected:.1f} s; "
            f"rebalance of {col.members + 1:,} members ({done} done); figures: "
            + ", ".join(f"{k} {v:,.2f}" for k, v in f.items()),
            flush=True,
        )
    finally:
        if routes is not None:
            routes.cancel()
        for c in clients:
            if c.conn is not None:
                c.conn.close()
        if boot is not None:
            boot.close()
        cluster.stop()  # every process by its PID, also on error


async def run_columns(cols: list[ClientColumn], args: argparse.Namespace) -> None:
    soft, hard = raise_open_files()
    args.max_clients = soft - FD_MARGIN
    print(
        f"clients: open-files limit {soft:,} (hard {hard:,}): at most {args.max_clients:,} "
        "client connections from this process",
        flush=True,
    )
    for col in cols:
        tmp = Path(tempfile.mkdtemp(prefix=f"scale-clients-{col.factor}x-"))
        try:
            print(
                f"clients {col.factor}x: {col.clients:,} connections over "
                f"{args.client_brokers} brokers, a group of {col.members:,} members",
                flush=True,
            )
            t0 = time.perf_counter()
            try:
                await measure(col, args, tmp)
                print(f"  clients {col.factor}x took {time.perf_counter() - t0:.0f} s", flush=True)
            except (RuntimeError, AssertionError, OSError, TimeoutError, RemotingError) as exc:
                print(f"  clients {col.factor}x: {exc!r}", flush=True)  # its figures stay empty
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def print_table(cols: list[ClientColumn]) -> Worst:
    """The clients' growth table; returns its worst ratio."""
    print()
    print(
        "clients: "
        + ", ".join(f"{c.factor}x = {c.clients:,} connections, {c.members:,} members" for c in cols)
        + " (load x: the group's members for the rebalance round)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine)")
    return print_growth(
        MEASURES, [c.factor for c in cols], [c.figures for c in cols], [c.loads for c in cols]
    )


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=200, help="client connections at 1x")
    parser.add_argument("--members", type=int, default=10, help="rebalance group members at 1x")
    parser.add_argument("--client-brokers", type=int, default=2, help="broker groups (1 broker)")
    parser.add_argument(
        "--route-refresh", type=float, default=30.0, help="each client's route lookup period, s"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=2.0,
        help="seconds the brokers are left to settle after their start and after the clients "
        "connected, before their memory is read",
    )
