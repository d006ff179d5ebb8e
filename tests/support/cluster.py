"""A whole cluster as real processes: three controllers and broker groups in controller mode.

Everything is on 127.0.0.1 (or, for partition tests, addresses in network namespaces the test
made) with ephemeral ports and a temp directory; every process is ended by
its PID when the cluster stops, also when a test fails.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.procs import (
    TEST_SEGMENT_BYTES,
    Daemon,
    free_port,
    port_open,
    small_segments_config,
)
from tests.support.wait import wait_until

STEADY_MASTER: str = "broker_heartbeat_timeout_ms = 10000\n"
"""Broker config for a test or bench that is not about failover: the brokers ask the controllers
for a 10 s heartbeat timeout (and so a 10 s write lease), where the default 1 s has a loaded
2-core machine (the suite's workers, Spark's JVM) starve a master past it now and then, and the
controllers fence it or elect another mid-test (seen in CI: clusterRT's sends answered
MASTER_FENCED, scrub_bench's 'not the master of broker-a')."""


class ControllerNode(Daemon):
    def __init__(
        self,
        tmp: Path,
        node_id: str,
        port: int,
        peers: str,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.data_dir = tmp / f"controller-{node_id}"
        argv = [
            *prefix, sys.executable, "-m", "controller",
            "--id", node_id,
            "--peers", peers,
            "--data-dir", str(self.data_dir),
            "--metrics-port", "0",
            "--log-format", "json",
        ]  # fmt: skip
        super().__init__(f"controller-{node_id}", argv, tmp / f"controller-{node_id}.log")


@contextlib.contextmanager
def lone_controller(tmp: Path, toml: str = "") -> Iterator[ControllerNode]:
    """One controller (node n0, a Raft group of one) on a free port, once it listens; stopped
    by its PID after. ``toml``: its config file's text, if any."""
    port = free_port()
    c = ControllerNode(tmp, "n0", port, f"n0-127.0.0.1:{port}")
    if toml:
        config = tmp / "controller.toml"
        config.write_text(toml)
        c.argv += ["--config", str(config)]
    c.start()
    try:
        wait_until(lambda: c.alive() and port_open(port), "the controller to listen", 30)
        yield c
    finally:
        c.stop()


class BrokerNode(Daemon):
    def __init__(
        self,
        tmp: Path,
        name: str,
        index: int,
        controllers: str,
        extra: list[str],
        config: str = "",
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
        segment_bytes: int = TEST_SEGMENT_BYTES,
    ) -> None:
        """``prefix``: argv before the interpreter (e.g. ``ip netns exec NS``)."""
        self.host = host
        self.prefix = list(prefix)
        self.broker_name = name
        self.index = index
        self.controllers = controllers
        self.extra = extra
        self.config_path = small_segments_config(
            tmp, f"{name}-{index}", config, segment_bytes=segment_bytes
        )
        self.ha_port = free_port()
        self.data_dir = tmp / f"{name}-{index}"
        super().__init__(f"{name}-{index}", [], tmp / f"{name}-{index}.log")
        self._listen_on(free_port())

    def _listen_on(self, port: int) -> None:
        self.port = port
        self.address = f"{self.host}:{port}"
        self.argv = [
            *self.prefix, sys.executable, "-m", "broker",
            "--config", str(self.config_path),
            "--broker-name", self.broker_name,
            "--listen", self.address,
            "--ha-port", str(self.ha_port),
            "--controllers", self.controllers,
            "--data-dir", str(self.data_dir),
            "--metrics-port", "0",
            "--log-format", "json",
            # No gRPC endpoint unless a test asks (its default, listen port + 2, is not reserved).
            "--grpc-listen", "0",
            *self.extra,
        ]  # fmt: skip

    def restart(self, *, new_address: bool = False) -> None:
        """Start again on the same data directory; with ``new_address`` on another port."""
        if new_address:
            self.ha_port = free_port()
            self._listen_on(free_port())
        self.start()
        wait_until(lambda: port_open(self.port, self.host), f"{self.name} to listen again", 30)


class Cluster:
    def __init__(
        self, tmp: Path, controller_host: str = "127.0.0.1", controller_prefix: Sequence[str] = ()
    ) -> None:
        self.tmp = tmp
        ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-{controller_host}:{p}" for i, p in enumerate(ports))
        self.controllers = [
            ControllerNode(tmp, f"n{i}", p, peers, controller_host, controller_prefix)
            for i, p in enumerate(ports)
        ]
        self.controller_addresses = ";".join(c.address for c in self.controllers)
        self.brokers: list[BrokerNode] = []

    def configure_controllers(self, toml: str) -> None:
        """Every controller reads ``toml`` (before :meth:`start_controllers`)."""
        config = self.tmp / "controller.toml"
        config.write_text(toml)
        for c in self.controllers:
            c.argv += ["--config", str(config)]

    def start_controllers(self) -> None:
        for c in self.controllers:
            c.start()
        for c in self.controllers:
            wait_until(lambda c=c: self._listening(c), f"{c.name} to listen", 30)

    def add_group(
        self,
        name: str,
        replicas: int = 3,
        extra: list[str] | None = None,
        config: str = "",
        per_broker: list[list[str]] | None = None,
        hosts: list[str] | None = None,
        prefixes: list[list[str]] | None = None,
        segment_bytes: int = TEST_SEGMENT_BYTES,
    ) -> list[BrokerNode]:
        """Start ``replicas`` brokers of group ``name``; ``config`` is TOML every one reads,
        ``per_broker[i]`` flags for broker ``i`` only; ``hosts[i]`` its listen host and
        ``prefixes[i]`` the argv before its interpreter."""
        group = [
            BrokerNode(
                self.tmp,
                name,
                i,
                self.controller_addresses,
                [*(extra or []), *(per_broker[i] if per_broker else [])],
                config,
                hosts[i] if hosts else "127.0.0.1",
                prefixes[i] if prefixes else (),
                segment_bytes,
            )
            for i in range(replicas)
        ]
        self.brokers += group  # before any can fail to start: stop() ends every one started
        for b in group:
            b.start()
        for b in group:
            wait_until(lambda b=b: self._listening(b), f"{b.name} to listen", 30)
        return group

    @staticmethod
    def _listening(d: ControllerNode | BrokerNode) -> bool:
        if not d.alive():
            raise AssertionError(f"{d.name} exited early:\n{d.log()[-3000:]}")
        return port_open(d.port, d.host)

    def stop(self) -> None:
        """The brokers, then the controllers (a stopping broker may still talk to them), each
        set stopping side by side: a test's teardown waits for the slowest, not the sum."""
        for group in (self.brokers, self.controllers):
            for d in group:
                d.terminate()
            for d in group:
                d.wait_stopped()

    def thaw_and_stop(self) -> None:
        """:meth:`stop`, every process thawed first (a test may have frozen it)."""
        for d in [*self.controllers, *self.brokers]:
            d.signal(signal.SIGCONT)
        self.stop()

    def logs(self) -> str:
        return "\n".join(
            f"--- {d.name}\n{d.log()[-2500:]}" for d in [*self.controllers, *self.brokers]
        )


@contextlib.contextmanager
def controllers_started(tmp: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` under ``tmp`` with its three controllers started (brokers are the
    caller's to add); every process thawed and ended by its PID after, also when the test
    fails."""
    c = Cluster(tmp)
    try:
        c.start_controllers()
        yield c
    finally:
        c.thaw_and_stop()
