"""Helpers for the controller tests: in-process Raft drivers, in-process controllers, and
``rmq-controller`` processes.

Every server, driver and process started here is stopped by the helper that started it, also
when a test fails. Waits poll a condition against a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgpack

from controller.raft_driver import DriverConfig, RaftDriver, StateMachine
from protocol.codes import ControllerCode, ResponseCode
from protocol.controller_requests.brokers import RegisterBroker
from protocol.controller_requests.heartbeats import BrokerHeartbeat
from remoting.server import RemotingServer
from tests.support.procs import Daemon, free_port, port_open
from tests.support.wait import wait_until, wait_until_async

# Fast timings for in-process tests: 20 ms ticks, elections in 100-200 ms.
FAST = {"tick_ms": 20, "heartbeat_ticks": 1, "election_ticks_min": 5, "election_ticks_max": 10}


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

    def snapshot_parts(self) -> Iterator[bytes]:
        return iter([self.snapshot()])

    def prepare_restore(
        self, data: bytes, between: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        restored = dict(msgpack.unpackb(data))
        return lambda: setattr(self, "data", restored)


def put(key: str, value: str) -> bytes:
    return msgpack.packb([key, value])  # type: ignore[no-any-return]


class DriverNode:
    """One Raft driver with its own RemotingServer on a loopback port."""

    def __init__(self, cluster: DriverCluster, node_id: str, *, join: bool = False) -> None:
        self.cluster = cluster
        self.id = node_id
        self.join = join
        self.kv = KV()
        self.sm: StateMachine = self.kv
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
        self.sm = self.kv if c.state_machine is None else c.state_machine(self.id)
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
        self.driver = RaftDriver(cfg, self.sm, rng=random.Random(hash(self.id) & 0xFFFF))
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
        state_machine: Callable[[str], StateMachine] | None = None,
    ) -> None:
        """``state_machine``: each node's state machine, made when it starts (default: a KV)."""
        self.tmp = tmp
        self.state_machine = state_machine
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

    async def __aenter__(self) -> DriverCluster:
        """Started; stopped when the ``async with`` block ends (also on a failure)."""
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

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

        await wait_until_async(agreed, "one agreed leader", timeout)
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
        wait_until(lambda: _listening(self), f"{self.name} to listen on {self.port}", timeout)
        return self


class ControllerCluster:
    """``rmq-controller`` processes on loopback sharing one TOML config; stop() ends each by
    its PID."""

    def __init__(
        self,
        tmp: Path,
        ids: tuple[str, ...] = ("n0", "n1", "n2"),
        config: dict[str, Any] | None = None,
    ) -> None:
        self.tmp = tmp
        self.ports = {i: free_port() for i in ids}
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in self.ports.items())
        self.config_path = tmp / "controller.toml"
        lines = [f"{k} = {_toml(v)}" for k, v in (config or {}).items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        self.procs = {i: self.make(i, p, self.peers) for i, p in self.ports.items()}

    def make(self, node_id: str, port: int, peers: str, *extra: str) -> ControllerProc:
        return ControllerProc(
            self.tmp, node_id, port, peers, ("--config", str(self.config_path), *extra)
        )

    @property
    def addresses(self) -> str:
        return ";".join(p.address for p in self.procs.values())

    def start(self) -> ControllerCluster:
        for proc in self.procs.values():
            proc.start()
        for proc in self.procs.values():
            wait_until(
                lambda proc=proc: _listening(proc), f"{proc.name} to listen on {proc.port}", 30
            )
        return self

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()

    def __enter__(self) -> ControllerCluster:
        """Started; every process stopped by its PID when the ``with`` block ends, or when one
        does not come up (also on a failure)."""
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _listening(proc: ControllerProc) -> bool:
    if not proc.alive():
        raise AssertionError(f"{proc.name} exited early:\n{proc.log()[-3000:]}")
    return port_open(proc.port)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


async def request(address: str, code: int, header: dict[str, Any] | None = None) -> Any:
    """One request to one address (any response code); None when it cannot be reached."""
    from remoting.client import RemotingClient
    from remoting.errors import RemotingError

    try:
        conn = await RemotingClient.connect(address, 1.0)
    except RemotingError:
        return None
    try:
        return await conn.request(code, header, timeout=2.0)
    except RemotingError:
        return None
    finally:
        conn.close()


async def metadata(address: str) -> dict[str, Any] | None:
    """CONTROLLER_GET_METADATA_INFO of one controller, None when it does not answer."""
    resp = await request(address, 1005)
    if resp is None or resp.code != 0:
        return None
    doc: dict[str, Any] = msgpack.unpackb(resp.body)
    return doc


async def agreed_leader(addresses: list[str], timeout: float = 15.0) -> str:
    """The leader id that a majority of ``addresses`` answer with, itself among them."""
    docs: list[dict[str, Any] | None] = []

    async def agreed() -> str | None:
        docs[:] = [await metadata(a) for a in addresses]
        named = {d["leaderId"] for d in docs if d is not None}
        answered = {d["self"] for d in docs if d is not None}
        if len(named) == 1 and named <= answered and len(answered) * 2 > len(addresses):
            return str(named.pop())
        return None

    return await wait_until_async(
        agreed, "an agreed controller leader", timeout, interval=0.05, on_timeout=lambda: str(docs)
    )


# --- in-process controllers and fake brokers ------------------------------------------------


def service_config(
    node_id: str, peers: str, data_dir: Path, **overrides: Any
) -> Any:  # ControllerConfig; Any keeps the import lazy for the process tests
    from controller.config import ControllerConfig
    from daemon.config import build

    values: dict[str, Any] = {
        "id": node_id,
        "peers": peers,
        "data_dir": str(data_dir),
        "metrics_port": 0,
        "fsync": False,
        "scan_interval_ms": 50,
        "broker_heartbeat_timeout_ms": 600,
        "request_timeout_ms": 2000,
        **FAST,
    }
    values.update(overrides)
    return build(ControllerConfig, {}, values)


class ServiceCluster:
    """Controllers (server + driver + service) in this process, on loopback ports."""

    def __init__(self, tmp: Path, ids: tuple[str, ...] = ("n0", "n1", "n2"), **overrides: Any):
        self.tmp = tmp
        self.overrides = overrides
        self.ports = {i: free_port() for i in ids}
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in self.ports.items())
        self.nodes: dict[str, Any] = {}

    @property
    def addresses(self) -> str:
        return ";".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def address(self, node_id: str) -> str:
        return f"127.0.0.1:{self.ports[node_id]}"

    async def start_node(self, node_id: str) -> Any:
        from controller.app import Controller

        cfg = service_config(
            node_id, self.peers, self.tmp / f"controller-{node_id}", **self.overrides
        )
        node = Controller(cfg)
        await node.start()
        self.nodes[node_id] = node
        return node

    async def stop_node(self, node_id: str) -> None:
        node = self.nodes.pop(node_id, None)
        if node is not None:
            await node.stop()

    async def start(self) -> ServiceCluster:
        for node_id in self.ports:
            await self.start_node(node_id)
        return self

    async def stop(self) -> None:
        for node_id in list(self.nodes):
            await self.stop_node(node_id)

    async def __aenter__(self) -> ServiceCluster:
        """Started; stopped when the ``async with`` block ends (also on a failure)."""
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def leader(self, timeout: float = 10.0) -> Any:
        def agreed() -> bool:
            active = [n for n in self.nodes.values() if n.driver.active]
            return len(active) == 1 and all(
                n.driver.lead == active[0].cfg.id for n in self.nodes.values()
            )

        await wait_until_async(agreed, "one agreed active controller", timeout)
        return next(n for n in self.nodes.values() if n.driver.active)

    def followers(self) -> list[Any]:
        return [n for n in self.nodes.values() if not n.driver.active]


class FakeBroker:
    """The controller-facing half of a broker: ids, registration, heartbeats, AlterSyncStateSet,
    route registration, and a server that records NOTIFY_BROKER_ROLE_CHANGED pushes."""

    def __init__(
        self,
        controllers: str,
        broker_name: str = "broker-a",
        *,
        cluster: str = "DefaultCluster",
        register_code: str | None = None,
    ) -> None:
        from client.bootstrap import Bootstrap
        from remoting.client import ConnectionPool

        self.controllers = controllers
        self.broker_name = broker_name
        self.cluster = cluster
        self.register_code = register_code or f"code-{broker_name}-{id(self)}"
        self.pool = ConnectionPool(2.0)
        self.bootstrap = Bootstrap(controllers, self.pool, timeout=2.0, busy_rounds=8)
        self.server = RemotingServer(name=f"fake-{broker_name}")
        self.notifications: list[dict[str, Any]] = []
        self.server.register(1008, self._on_notify)
        self.server.register(1007, self._on_epoch_cache)
        self.server.register(17, self._on_update_topic)
        self.topics: dict[str, int] = {}
        """What the controllers pushed (UPDATE_AND_CREATE_TOPIC): topic -> queues."""
        self.address = ""
        self.broker_id = -1
        self.epoch = 0
        self.max_offset = 0
        self.priority = 0
        self.timeout_ms = 0
        self._beating: asyncio.Task[None] | None = None
        self._stopping = False
        """Set while :meth:`stop_heartbeats` ends the heartbeat loop."""

    def _on_notify(self, conn: Any, frame: Any) -> Any:
        from protocol.remoting import response

        body = msgpack.unpackb(frame.body) if frame.body else {}
        self.notifications.append({**frame.header, **body})
        return response(frame, 0)

    def _on_update_topic(self, conn: Any, frame: Any) -> Any:
        from protocol.remoting import response

        self.topics[frame.header["topic"]] = frame.header["queues"]
        return response(frame, 0)

    def _on_epoch_cache(self, conn: Any, frame: Any) -> Any:
        from protocol.remoting import response

        master = bool(self.notifications) and self.notifications[-1]["masterBrokerId"] == (
            self.broker_id
        )
        doc = {
            "brokerId": self.broker_id,
            "address": self.address,
            "role": "MASTER" if master else "SLAVE",
            "maxOffset": self.max_offset,
            "confirmOffset": self.max_offset,
            "epochs": [{"epoch": 1, "startOffset": 0, "endOffset": self.max_offset}],
        }
        return response(frame, 0, None, msgpack.packb(doc))

    async def start(self) -> FakeBroker:
        port = await self.server.start("127.0.0.1", 0)
        self.address = f"127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        await self.stop_heartbeats()
        self.pool.close()
        await self.server.stop()

    async def call(self, code: int, header: dict[str, Any], body: bytes | None = None) -> Any:
        return await self.bootstrap.call(code, header, body)

    async def join(self) -> int:
        """GetNextBrokerId, ApplyBrokerId, RegisterBroker: the broker's id."""
        base = {"clusterName": self.cluster, "brokerName": self.broker_name}
        resp = await self.call(1012, base)
        broker_id = int(resp.header["nextBrokerId"])
        await self.call(
            1013, {**base, "appliedBrokerId": broker_id, "registerCheckCode": self.register_code}
        )
        self.broker_id = broker_id
        await self.register()
        return broker_id

    async def register(self, code: str | None = None, *, send_code: bool = True) -> Any:
        """CONTROLLER_REGISTER_BROKER with ``registerCheckCode`` (``code``, by default this
        broker's own, as a real broker sends it); none at all with ``send_code=False``."""
        registration = self.registration(code, send_code=send_code)
        return await self.call(registration.code, *registration.encode())

    def identity(self) -> dict[str, Any]:
        """The fields naming this broker in its registration and heartbeats."""
        return {
            "cluster": self.cluster,
            "broker_name": self.broker_name,
            "broker_id": self.broker_id,
            "broker_address": self.address,
        }

    def registration(self, code: str | None = None, *, send_code: bool = True) -> RegisterBroker:
        """The CONTROLLER_REGISTER_BROKER :meth:`register` sends."""
        sent = (self.register_code if code is None else code) if send_code else None
        return RegisterBroker(**self.identity(), register_check_code=sent)

    async def heartbeat(self, body: bytes | None = None) -> Any:
        """BROKER_HEARTBEAT; ``body``: a traffic report (protocol/traffic.py), or anything."""
        beat = self.beat(body)
        return await self.call(beat.code, *beat.encode())

    async def heartbeat_as_a_broker(self, body: bytes | None = None) -> Any:
        """BROKER_HEARTBEAT as a real broker sends it: a controller that does not know this
        connection as the broker's (CONTROLLER_BROKER_NEED_TO_BE_REGISTERED: a new leader, or a
        new connection after a request timed out under load) gets a registration, and then the
        heartbeat again."""
        from client.errors import BrokerError

        try:
            return await self.heartbeat(body)
        except BrokerError as exc:
            if exc.code != ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                raise
        await self.register()
        return await self.heartbeat(body)

    def beat(self, body: bytes | None = None) -> BrokerHeartbeat:
        """The BROKER_HEARTBEAT :meth:`heartbeat` sends: this broker's figures."""
        return BrokerHeartbeat(
            **self.identity(),
            epoch=self.epoch,
            max_offset=self.max_offset,
            confirm_offset=self.max_offset,
            election_priority=self.priority,
            heartbeat_timeout_ms=self.timeout_ms,
            traffic_report=body,
        )

    def start_heartbeats(self, interval: float = 0.1) -> None:
        from client.errors import BrokerError

        async def beat() -> None:
            while not self._stopping:
                try:
                    await self.heartbeat()
                except BrokerError as exc:
                    # As a real broker does: a controller that does not know this connection
                    # as the broker's (a new leader, a new connection) gets a registration.
                    if exc.code == 2010:
                        with contextlib.suppress(Exception):
                            await self.register()
                except Exception:  # a controller election in progress; keep beating
                    pass
                await asyncio.sleep(interval)

        if self._beating is None:
            self._beating = asyncio.create_task(beat())

    async def stop_heartbeats(self) -> None:
        """The heartbeat loop ended: cancelled again until it is (a cancellation that lands
        as a call completes may be lost in the libraries under it), and told to stop."""
        beating, self._beating = self._beating, None
        if beating is None:
            return
        self._stopping = True
        while not beating.done():
            beating.cancel()
            await asyncio.wait({beating}, timeout=1.0)
        self._stopping = False

    def close_connections(self) -> None:
        """Drop every connection to the controllers (as a broker process dying would)."""
        self.pool.close()

    async def alter(self, members: list[int], master_epoch: int, ss_epoch: int) -> Any:
        body = msgpack.packb({"syncStateSet": members, "syncStateSetEpoch": ss_epoch})
        header = {
            "brokerName": self.broker_name,
            "masterBrokerId": self.broker_id,
            "masterEpoch": master_epoch,
        }
        return await self.call(1001, header, body)

    async def register_routes(self, topics: dict[str, int], address: str) -> Any:
        """REGISTER_BROKER to one controller; returns the connection used."""
        conn = await self.pool.get(address)
        header = {
            "clusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "brokerAddress": self.address,
        }
        resp = await conn.request(103, header, msgpack.packb({"topics": topics}))
        assert resp.code == 0, resp.header
        return conn


async def groups_with_routes(
    cluster: ServiceCluster, leader: str, topics_of: Mapping[str, Mapping[str, int]]
) -> list[FakeBroker]:
    """A group of three simulated brokers for each group name in ``topics_of``, each broker
    joined and the group's topics (topic -> queues) registered on the controller at ``leader``;
    16 groups at a time. If a group fails, the brokers started are stopped and its error
    raised."""

    async def group(name: str) -> list[FakeBroker]:
        brokers = []
        try:
            for b in range(3):
                broker = FakeBroker(cluster.addresses, name, register_code=f"{name}-{b}")
                brokers.append(broker)
                await broker.start()
                await broker.join()
                await broker.register_routes(dict(topics_of[name]), leader)
        except BaseException:
            await asyncio.gather(*(b.stop() for b in brokers), return_exceptions=True)
            raise
        return brokers

    sem = asyncio.Semaphore(16)

    async def limited(name: str) -> list[FakeBroker]:
        async with sem:
            return await group(name)

    groups = await asyncio.gather(*(limited(n) for n in topics_of), return_exceptions=True)
    brokers = [b for gr in groups if isinstance(gr, list) for b in gr]
    failed = [gr for gr in groups if isinstance(gr, BaseException)]
    if failed:
        await asyncio.gather(*(b.stop() for b in brokers), return_exceptions=True)
        raise failed[0]
    return brokers


async def replica_info(controllers: str, broker_name: str) -> dict[str, Any]:
    """CONTROLLER_GET_REPLICA_INFO through any controller: header and body merged."""
    from client.bootstrap import Bootstrap
    from remoting.client import ConnectionPool

    pool = ConnectionPool(2.0)
    try:
        resp = await Bootstrap(controllers, pool, 2.0).call(1004, {"brokerName": broker_name})
        return {**resp.header, **(msgpack.unpackb(resp.body) if resp.body else {})}
    finally:
        pool.close()
