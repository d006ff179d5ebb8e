"""A whole cluster as real processes: three controllers and broker groups in controller mode.

Everything is on 127.0.0.1 with ephemeral ports and a temp directory; every process is ended by
its PID when the cluster stops, also when a test fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.procs import Daemon, free_port, port_open, small_segments_config, wait_until


class ControllerNode(Daemon):
    def __init__(self, tmp: Path, node_id: str, port: int, peers: str) -> None:
        self.node_id = node_id
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.data_dir = tmp / f"controller-{node_id}"
        argv = [
            sys.executable, "-m", "controller",
            "--id", node_id,
            "--peers", peers,
            "--data-dir", str(self.data_dir),
            "--metrics-port", "0",
            "--log-format", "json",
        ]  # fmt: skip
        super().__init__(f"controller-{node_id}", argv, tmp / f"controller-{node_id}.log")


class BrokerNode(Daemon):
    def __init__(
        self, tmp: Path, name: str, index: int, controllers: str, extra: list[str]
    ) -> None:
        self.broker_name = name
        self.port = free_port()
        self.ha_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.data_dir = tmp / f"{name}-{index}"
        argv = [
            sys.executable, "-m", "broker",
            "--config", str(small_segments_config(tmp, f"{name}-{index}")),
            "--broker-name", name,
            "--listen", self.address,
            "--ha-port", str(self.ha_port),
            "--controllers", controllers,
            "--data-dir", str(self.data_dir),
            "--metrics-port", "0",
            "--log-format", "json",
            *extra,
        ]  # fmt: skip
        super().__init__(f"{name}-{index}", argv, tmp / f"{name}-{index}.log")

    def restart(self) -> None:
        self.start()
        wait_until(lambda: port_open(self.port), 30, f"{self.name} to listen again")


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        self.controllers = [ControllerNode(tmp, f"n{i}", p, peers) for i, p in enumerate(ports)]
        self.controller_addresses = ";".join(c.address for c in self.controllers)
        self.brokers: list[BrokerNode] = []

    def start_controllers(self) -> None:
        for c in self.controllers:
            c.start()
        for c in self.controllers:
            wait_until(lambda c=c: self._listening(c), 30, f"{c.name} to listen")

    def add_group(
        self, name: str, replicas: int = 3, extra: list[str] | None = None
    ) -> list[BrokerNode]:
        group = [
            BrokerNode(self.tmp, name, i, self.controller_addresses, extra or [])
            for i in range(replicas)
        ]
        for b in group:
            b.start()
        for b in group:
            wait_until(lambda b=b: self._listening(b), 30, f"{b.name} to listen")
        self.brokers += group
        return group

    @staticmethod
    def _listening(d: ControllerNode | BrokerNode) -> bool:
        if not d.alive():
            raise AssertionError(f"{d.name} exited early:\n{d.log()[-3000:]}")
        return port_open(d.port)

    def stop(self) -> None:
        for d in [*self.brokers, *self.controllers]:
            d.stop()

    def logs(self) -> str:
        return "\n".join(
            f"--- {d.name}\n{d.log()[-2500:]}" for d in [*self.controllers, *self.brokers]
        )
