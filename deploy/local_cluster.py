"""The local-cluster launcher behind ``make run``.

Starts the daemons of a development cluster on loopback with embedded defaults, data under
``./var/``, logs to this console, and stops them cleanly (SIGTERM, then wait) on Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("RMQ_VAR", ROOT / "var"))
BIN = Path(sys.executable).parent

CONTROLLERS = {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
CONTROLLER_PEERS = ";".join(f"{node_id}-{address}" for node_id, address in CONTROLLERS.items())
CONTROLLER_ADDRESSES = ";".join(CONTROLLERS.values())

# One broker group of three replicas: (listen port, HA port, metrics port) each.
BROKER_GROUP = "broker-a"
BROKERS = [(10911, 10912, 9300), (10921, 10922, 9301), (10931, 10932, 9302)]


class LocalCluster:
    """The daemons of the development cluster as child processes, ended by PID."""

    def __init__(
        self,
        var: Path,
        *,
        broker_config: Path | None = None,
        log_format: str = "console",
        log_dir: Path | None = None,
    ) -> None:
        """``log_dir``: each daemon's output goes to ``<name>.log`` there instead of the console."""
        self.var = var
        self.log_dir = log_dir
        self.broker_config = broker_config
        self.log_format = log_format
        self.children: dict[str, subprocess.Popen[bytes]] = {}

    def controller_argv(self, index: int, node_id: str) -> list[str]:
        return [
            str(BIN / "rmq-controller"),
            "--id", node_id,
            "--peers", CONTROLLER_PEERS,
            "--data-dir", str(self.var / f"controller-{node_id}"),
            "--metrics-port", str(9200 + index),
            "--log-format", self.log_format,
        ]  # fmt: skip

    def broker_argv(self, index: int) -> list[str]:
        listen, ha, metrics = BROKERS[index]
        config = ["--config", str(self.broker_config)] if self.broker_config else []
        return [
            str(BIN / "rmq-broker"),
            *config,
            "--cluster", "DefaultCluster",
            "--broker-name", BROKER_GROUP,
            "--listen", f"127.0.0.1:{listen}",
            "--ha-port", str(ha),
            "--controllers", CONTROLLER_ADDRESSES,
            "--data-dir", str(self.var / f"{BROKER_GROUP}-{index}"),
            "--metrics-port", str(metrics),
            "--log-format", self.log_format,
        ]  # fmt: skip

    def processes(self) -> list[tuple[str, list[str]]]:
        return [
            *((f"controller-{n}", self.controller_argv(i, n)) for i, n in enumerate(CONTROLLERS)),
            *((broker_process_name(i), self.broker_argv(i)) for i in range(len(BROKERS))),
        ]

    def start(self, name: str | None = None) -> None:
        """Start every daemon (or the one named) that is not running."""
        self.var.mkdir(parents=True, exist_ok=True)
        for proc_name, argv in self.processes():
            if name not in (None, proc_name):
                continue
            running = self.children.get(proc_name)
            if running is not None and running.poll() is None:
                continue
            out = None
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                out = (self.log_dir / f"{proc_name}.log").open("ab")
            # Own session: the terminal's Ctrl-C reaches only us; we stop children in order.
            self.children[proc_name] = subprocess.Popen(
                argv,
                cwd=ROOT,
                start_new_session=True,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
            )
            if out is not None:
                out.close()

    def exited(self) -> list[tuple[str, int]]:
        return [(n, p.returncode) for n, p in self.children.items() if p.poll() is not None]

    def kill9(self, name: str) -> None:
        proc = self.children[name]
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to every child (brokers first), then SIGKILL past the deadline."""
        for proc in reversed(self.children.values()):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, proc in reversed(self.children.items()):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"local cluster: {name} did not stop in time; killing it", flush=True)
                proc.kill()
                proc.wait()


def broker_process_name(index: int) -> str:
    return f"{BROKER_GROUP}-{index}"


def broker_address(index: int) -> str:
    return f"127.0.0.1:{BROKERS[index][0]}"


def banner(var: Path) -> str:
    c = CONTROLLER_ADDRESSES
    return f"""
Local cluster starting (data under {var}): controllers n0..n2 on {c.replace(";", ", ")}
(metrics 9200..9202), broker group {BROKER_GROUP} of three replicas on 127.0.0.1:10911,
10921, 10931 (HA ports +1, metrics 9300..9302). Try, in another terminal:

  export RMQCTL_ADDRESSES="{c}"
  .venv/bin/rmqctl getSyncStateSet -b {BROKER_GROUP}
  .venv/bin/rmqctl updateTopic -t TopicTest -q 4
  .venv/bin/rmqctl sendMessage -t TopicTest -p "hello" --count 10
  .venv/bin/rmqctl --json consumeMessage -t TopicTest -g demo-group --count 10 --timeout 5
  .venv/bin/rmqctl topicRoute -t TopicTest
  .venv/bin/rmqctl clusterList
  .venv/bin/rmqctl getBrokerEpoch -b {BROKER_GROUP}
  .venv/bin/rmqctl getControllerMetaData
  curl -s http://127.0.0.1:9300/metrics | grep rmq_broker_messages_in_total

A failover to watch: `make demo` (its own cluster under var/demo: kills the master, shows the
new one, brings the old one back). Ctrl-C stops this cluster cleanly.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the local development cluster (make run).")
    parser.add_argument("--var", type=Path, default=VAR, help="data directory (default ./var)")
    parser.add_argument("--broker-config", type=Path, help="TOML file every broker reads first")
    parser.add_argument("--log-format", default="console", choices=["console", "json"])
    args = parser.parse_args(argv)
    cluster = LocalCluster(args.var, broker_config=args.broker_config, log_format=args.log_format)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(banner(args.var), flush=True)
    status = 0
    try:
        cluster.start()
        while not stopping:
            for name, code in cluster.exited():
                print(f"local cluster: {name} exited with status {code}; stopping", flush=True)
                stopping = True
                status = 1
            time.sleep(0.2)
    finally:
        cluster.stop()
    print("local cluster stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
