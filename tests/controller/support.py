"""Helpers for the controller tests: in-process Raft drivers, in-process controllers, and
``rmq-controller`` processes.

Every server, driver and process started here is stopped by the helper that started it, also
when a test fails. Waits poll a condition against a deadline.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack

from controller.codes import ControllerCode
from controller.raft_driver import DriverConfig, RaftDriver
from remoting.server import RemotingServer
from tests.support.procs import Daemon, free_port, port_open, wait_until

# Fast timings for in-process tests: 20 ms ticks, elections in 100-200 ms.
FAST = {"tick_ms": 20, "heartbeat_ticks": 1, "election_ticks_min": 5, "election_ticks_max": 10}


async def eventually(
    cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll ``cond`` on the loop until it holds; AssertionError past the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.01)


class KV:
    """A state machine of key/value puts: ``apply`` returns the previous value."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.applied: list[int] = []

    def apply(self, index: int, data: bytes) -> object:
        key, value = msgpack.unpackb(data)
        old = self.data.get(key)
        self.data[key] = value
        self.applied.append(index)
        return old

    def snapshot(self) -> bytes:
        return msgpack.packb(self.data)  # type: ignore[no-any-return]

    def restore(self, data: bytes) -> None:
        self.data = dict(msgpack.unpackb(data))


def put(key: str, value: str) -> bytes:
    return msgpack.packb([key, value])  # type: ignore[no-any-return]


class DriverNode:
    """One Raft driver with its own RemotingServer on a loopback port."""

    def __init__(self, cluster: DriverCluster, node_id: str, *, join: bool = False) -> None:
        self.cluster = cluster
        self.id = node_id
        self.join = join
        self.kv = KV()
        self.server: RemotingServer | None = None
        self.driver: RaftDriver | None = None

    @property
    def d(self) -> RaftDriver:
        assert self.driver is not None, f"{self.id} is not running"
        return self.driver

    @property
    def running(self) -> bool:
        return self.driver is not None

    async def start(self) -> DriverNode:
        c = self.cluster
        self.kv = KV()
        cfg = DriverConfig(
            node_id=self.id,
            peers=dict(c.addresses),
            data_dir=c.tmp / self.id,
            join=self.join,
            snapshot_every=c.snapshot_every,
            fsync=False,
            preferred_leader=c.preferred_leader,
            **FAST,  # type: ignore[arg-type]
        )
        self.driver = RaftDriver(cfg, self.kv, rng=random.Random(hash(self.id) & 0xFFFF))
        self.server = RemotingServer(name=self.id)
        self.server.register(ControllerCode.RAFT_MESSAGE, self.driver.handle_raft_frame)
        host, _, port = c.addresses[self.id].rpartition(":")
        await self.server.start(host, int(port))
        await self.driver.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.driver is not None:
            await self.driver.stop()
            self.driver = None


class DriverCluster:
    """Raft drivers on loopback, founded from ``ids``; more may join later."""

    def __init__(
        self,
        tmp: Path,
        ids: tuple[str, ...] = ("n0", "n1", "n2"),
        *,
        snapshot_every: int = 10_000,
        preferred_leader: str | None = None,
    ) -> None:
        self.tmp = tmp
        self.snapshot_every = snapshot_every
        self.preferred_leader = preferred_leader
        self.addresses = {i: f"127.0.0.1:{free_port()}" for i in ids}
        self.nodes = {i: DriverNode(self, i) for i in ids}

    async def start(self) -> DriverCluster:
        for node in self.nodes.values():
            await node.start()
        return self

    async def stop(self) -> None:
        for node in self.nodes.values():
            await node.stop()

    def add_node(self, node_id: str) -> DriverNode:
        self.addresses[node_id] = f"127.0.0.1:{free_port()}"
        node = DriverNode(self, node_id, join=True)
        self.nodes[node_id] = node
        return node

    def running(self) -> list[DriverNode]:
        return [n for n in self.nodes.values() if n.running]

    def leaders(self) -> list[DriverNode]:
        return [n for n in self.running() if n.d.active]

    async def leader(self, timeout: float = 10.0) -> DriverNode:
        """The one active leader, once every running node agrees on it."""

        def agreed() -> bool:
            leaders = self.leaders()
            if len(leaders) != 1:
                return False
            lead = leaders[0].id
            return all(n.d.lead == lead for n in self.running())

        await eventually(agreed, timeout, "one agreed leader")
        return self.leaders()[0]


def controller_argv(node_id: str, peers: str, data_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "controller",
        "--id", node_id,
        "--peers", peers,
        "--data-dir", str(data_dir),
        "--metrics-port", "0",
        "--log-format", "json",
        *extra,
    ]  # fmt: skip


class ControllerProc(Daemon):
    """One ``rmq-controller`` process."""

    def __init__(
        self, tmp: Path, node_id: str, port: int, peers: str, extra: tuple[str, ...] = ()
    ) -> None:
        self.node_id = node_id
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.data_dir = tmp / f"controller-{node_id}"
        super().__init__(
            f"controller-{node_id}",
            controller_argv(node_id, peers, self.data_dir, *extra),
            tmp / f"controller-{node_id}.log",
        )

    def start_and_wait(self, timeout: float = 30.0) -> ControllerProc:
        self.start()

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return port_open(self.port)

        wait_until(ready, timeout, f"{self.name} to listen on {self.port}")
        return self


class ControllerCluster:
    """Three ``rmq-controller`` processes on loopback; stop() ends each by its PID."""

    def __init__(self, tmp: Path, ids: tuple[str, ...] = ("n0", "n1", "n2"), **kw: Any) -> None:
        self.tmp = tmp
        self.ports = {i: free_port() for i in ids}
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in self.ports.items())
        self.procs = {
            i: ControllerProc(tmp, i, p, self.peers, tuple(kw.get("extra", ())))
            for i, p in self.ports.items()
        }

    @property
    def addresses(self) -> str:
        return ";".join(p.address for p in self.procs.values())

    def start(self) -> ControllerCluster:
        for proc in self.procs.values():
            proc.start()
        for proc in self.procs.values():
            wait_until(
                lambda proc=proc: proc.alive() and port_open(proc.port),
                30,
                f"{proc.name} to listen",
            )
        return self

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
