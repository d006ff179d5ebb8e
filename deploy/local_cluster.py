"""The local-cluster launcher behind ``make run``.

Starts the daemons of a development cluster on loopback with embedded defaults, data under
``./var/``, and their logs on this console, each line whole and prefixed with the daemon's name
(``n0``, ``broker-a@10911``). Once the controllers elected a master for the broker group it
prints one table (process, address, broker id, role, metrics port) and the ``rmqctl`` lines to
try, the same as the README's. Ctrl-C stops the daemons cleanly, in an order that leaves nobody
complaining: the slaves, then the master, then the controllers (SIGTERM, then wait).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("RMQ_VAR", ROOT / "var"))
# The daemons and rmqctl run as ``python -m`` from the repository root: the code of this tree,
# whichever checkout the virtualenv was installed from.
PYTHON_M = [sys.executable, "-m"]

CONTROLLERS = {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
CONTROLLER_PEERS = ";".join(f"{node_id}-{address}" for node_id, address in CONTROLLERS.items())
CONTROLLER_ADDRESSES = ";".join(CONTROLLERS.values())

# One broker group of three replicas: (listen port, HA port, metrics port) each.
BROKER_GROUP = "broker-a"
BROKERS = [(10911, 10912, 9300), (10921, 10922, 9301), (10931, 10932, 9302)]
CONTROLLER_METRICS_BASE = 9200

# The lines to try, printed once the group has a master; README.md shows the same lines (a test
# compares them), the curl line there with 9300 where this prints the master's metrics port.
HINTS = """\
export RMQCTL_ADDRESSES="{addresses}"   # or -a "..." on each call
.venv/bin/rmqctl getSyncStateSet -b {group}
.venv/bin/rmqctl updateTopic -t TopicTest -q 4
.venv/bin/rmqctl sendMessage -t TopicTest -p "hello" --count 10
.venv/bin/rmqctl --json consumeMessage -t TopicTest -g demo --count 10 --timeout 5
.venv/bin/rmqctl topicRoute -t TopicTest
.venv/bin/rmqctl clusterList
.venv/bin/rmqctl getBrokerEpoch -b {group}
.venv/bin/rmqctl electMaster -b {group} -i 2          # planned failover to broker id 2
curl -s http://127.0.0.1:{metrics_port}/metrics | grep rmq_broker_"""


def hints(master_metrics_port: int) -> str:
    """The lines to try, with the master's metrics port in the curl line."""
    return HINTS.format(
        addresses=CONTROLLER_ADDRESSES, group=BROKER_GROUP, metrics_port=master_metrics_port
    )


class Console:
    """The launcher's stdout, shared by every daemon's output: whole lines, each prefixed with
    the daemon's name, written one at a time."""

    def __init__(self, out: IO[str], width: int) -> None:
        self.out = out
        self.width = width
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._lock:
            self.out.write(text if text.endswith("\n") else text + "\n")
            self.out.flush()

    def pump(self, name: str, stream: IO[bytes]) -> threading.Thread:
        """Copy a daemon's output, line by line, until it closes (the daemon exited)."""

        def copy() -> None:
            prefix = f"{name:<{self.width}} | "
            with stream:
                for raw in iter(stream.readline, b""):
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    with self._lock:
                        self.out.write(prefix + line + "\n")
                        self.out.flush()

        thread = threading.Thread(target=copy, name=f"pump-{name}", daemon=True)
        thread.start()
        return thread


class LocalCluster:
    """The daemons of the development cluster as child processes, ended by PID."""

    def __init__(
        self,
        var: Path,
        *,
        broker_config: Path | None = None,
        log_format: str = "console",
        log_dir: Path | None = None,
        console: Console | None = None,
    ) -> None:
        """``log_dir``: each daemon's output goes to ``<name>.log`` there; else to ``console``
        (prefixed with the daemon's name), else to this process's own stdout and stderr."""
        self.var = var
        self.log_dir = log_dir
        self.console = console
        self.broker_config = broker_config
        self.log_format = log_format
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._pumps: list[threading.Thread] = []

    def controller_argv(self, index: int, node_id: str) -> list[str]:
        return [
            *PYTHON_M, "controller",
            "--id", node_id,
            "--peers", CONTROLLER_PEERS,
            "--data-dir", str(self.var / f"controller-{node_id}"),
            "--metrics-port", str(CONTROLLER_METRICS_BASE + index),
            "--log-format", self.log_format,
        ]  # fmt: skip

    def broker_argv(self, index: int) -> list[str]:
        listen, ha, metrics = BROKERS[index]
        config = ["--config", str(self.broker_config)] if self.broker_config else []
        return [
            *PYTHON_M, "broker",
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
            *((n, self.controller_argv(i, n)) for i, n in enumerate(CONTROLLERS)),
            *((broker_process_name(i), self.broker_argv(i)) for i in range(len(BROKERS))),
        ]

    def start(self, name: str | None = None, *, controllers_first: float = 15.0) -> None:
        """Start every daemon (or the one named) that is not running. Starting them all, the
        brokers wait (up to ``controllers_first`` seconds) until the controllers listen, so
        their first requests find someone to answer."""
        self.var.mkdir(parents=True, exist_ok=True)
        if name is None:
            for node_id in CONTROLLERS:
                self._start_one(node_id)
            wait_listening(CONTROLLERS.values(), controllers_first)
            for index in range(len(BROKERS)):
                self._start_one(broker_process_name(index))
        else:
            self._start_one(name)

    def _start_one(self, name: str) -> None:
        argv = dict(self.processes())[name]
        running = self.children.get(name)
        if running is not None and running.poll() is None:
            return
        out: IO[bytes] | int | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = (self.log_dir / f"{name}.log").open("ab")
        elif self.console is not None:
            out = subprocess.PIPE
        # Own session: the terminal's Ctrl-C reaches only us; we stop children in order.
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.children[name] = proc
        if self.log_dir is not None and out is not None and not isinstance(out, int):
            out.close()
        if self.console is not None and proc.stdout is not None:
            self._pumps.append(self.console.pump(name, proc.stdout))

    def exited(self) -> list[tuple[str, int]]:
        return [(n, p.returncode) for n, p in self.children.items() if p.poll() is not None]

    def kill9(self, name: str) -> None:
        proc = self.children[name]
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM in stages: the slaves, then the master (so no slave sees its master go), then
        the controllers; SIGKILL to whoever is past the deadline."""
        deadline = time.monotonic() + timeout
        master = master_process_name()
        brokers = [broker_process_name(i) for i in range(len(BROKERS))]
        stages = [
            [b for b in brokers if b != master],
            [b for b in brokers if b == master],
            [n for n in self.children if n not in brokers],
        ]
        for stage in stages:
            procs = [(n, self.children[n]) for n in stage if n in self.children]
            for _, proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for name, proc in procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self._say(f"local cluster: {name} did not stop in time; killing it")
                    proc.kill()
                    proc.wait()
        for pump in self._pumps:
            pump.join(timeout=5)

    def _say(self, text: str) -> None:
        if self.console is not None:
            self.console.say(text)
        else:
            print(text, flush=True)


def broker_process_name(index: int) -> str:
    return f"{BROKER_GROUP}@{BROKERS[index][0]}"


def broker_address(index: int) -> str:
    return f"127.0.0.1:{BROKERS[index][0]}"


def wait_listening(addresses: Iterable[str], timeout: float) -> bool:
    """True once every address accepts a TCP connection, False past ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pending = list(addresses)
    while pending:
        host, _, port = pending[0].rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                pending.pop(0)
                continue
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def rmqctl_json(*args: str, timeout: float = 10.0) -> Any:
    """``rmqctl --json ARGS`` against the local controllers: the document, or None on failure."""
    try:
        done = subprocess.run(
            [*PYTHON_M, "rmqctl", "--json", *args, "-a", CONTROLLER_ADDRESSES],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,  # the terminal's Ctrl-C is ours to handle
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def master_process_name() -> str | None:
    """The process name of the broker group's master, as the controllers see it now."""
    doc = rmqctl_json("getSyncStateSet", "-b", BROKER_GROUP, timeout=5.0)
    address = doc.get("masterAddress") if isinstance(doc, dict) else None
    for index in range(len(BROKERS)):
        if address == broker_address(index):
            return broker_process_name(index)
    return None


def cluster_table() -> tuple[str, int] | None:
    """Once the controllers have a leader and the broker group a master with every replica in
    its SyncStateSet: the table of every process, and the master's metrics port."""
    meta = rmqctl_json("getControllerMetaData")
    group = rmqctl_json("getSyncStateSet", "-b", BROKER_GROUP)
    if not isinstance(meta, dict) or not isinstance(group, dict) or not meta.get("leaderId"):
        return None
    replicas = {r["address"]: r for r in group.get("replicas") or []}
    in_sync = set(group.get("syncStateSet") or [])
    master_id = group.get("masterBrokerId")
    addresses = [broker_address(i) for i in range(len(BROKERS))]
    if not group.get("masterAddress") or any(
        a not in replicas or replicas[a]["brokerId"] not in in_sync for a in addresses
    ):
        return None
    rows: list[list[str]] = []
    for index, (node_id, address) in enumerate(CONTROLLERS.items()):
        role = "controller, leader" if node_id == meta["leaderId"] else "controller, follower"
        rows.append([node_id, address, "-", role, str(CONTROLLER_METRICS_BASE + index)])
    master_port = 0
    for index, address in enumerate(addresses):
        broker_id = replicas[address]["brokerId"]
        role = "master" if broker_id == master_id else "slave"
        metrics = BROKERS[index][2]
        if role == "master":
            master_port = metrics
        rows.append([broker_process_name(index), address, str(broker_id), role, str(metrics)])
    return table(["process", "address", "broker id", "role", "metrics port"], rows), master_port


def table(headers: list[str], rows: list[list[str]]) -> str:
    cells = [headers, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


#: The one line saying this cluster is open (README.md and docs/operations.md say how to close it).
OPEN_NOTICE = (
    "Security off: authentication and TLS are off, anyone on this host may connect (a first "
    'try only; auth_enabled and tls_enabled turn them on, docs/operations.md "Security").'
)


def banner(var: Path) -> str:
    return (
        f"Local cluster starting (data under {var}): controllers n0..n2 and broker group\n"
        f"{BROKER_GROUP} of three replicas. Their logs follow, each line prefixed with its "
        "process;\nonce a master is elected, a table of the processes and the commands to try. "
        "Ctrl-C stops it.\n"
        f"{OPEN_NOTICE}"
    )


def ready_text(cluster_table: str, master_metrics_port: int) -> str:
    lines = "\n".join(f"  {line}" for line in hints(master_metrics_port).splitlines())
    return (
        f"\nLocal cluster ready:\n\n{cluster_table}\n\nTry, in another terminal:\n\n{lines}\n\n"
        "A failover to watch: `make demo` (its own cluster under var/demo, on the same ports:\n"
        "stop this one first).\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the local development cluster (make run).")
    parser.add_argument("--var", type=Path, default=VAR, help="data directory (default ./var)")
    parser.add_argument("--broker-config", type=Path, help="TOML file every broker reads first")
    parser.add_argument("--log-format", default="console", choices=["console", "json"])
    args = parser.parse_args(argv)
    names = [name for name, _ in LocalCluster(args.var).processes()]
    console = Console(sys.stdout, max(len(n) for n in names))
    cluster = LocalCluster(
        args.var, broker_config=args.broker_config, log_format=args.log_format, console=console
    )
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    console.say(banner(args.var))
    status = 0
    ready = False
    started = time.monotonic()
    reminded = False
    try:
        cluster.start()
        while not stopping:
            for name, code in cluster.exited():
                console.say(f"local cluster: {name} exited with status {code}; stopping")
                stopping = True
                status = 1
            if stopping:
                break
            if not ready:
                found = cluster_table()
                if found is not None:
                    console.say(ready_text(*found))
                    ready = True
                elif not reminded and time.monotonic() - started > 30:
                    reminded = True
                    console.say(
                        f"local cluster: {BROKER_GROUP} has no master with every replica in sync "
                        f"yet; `rmqctl getSyncStateSet -b {BROKER_GROUP}` shows where it stands"
                    )
            time.sleep(0.2 if not ready else 0.5)
    finally:
        console.say("local cluster: stopping (slaves, master, then controllers)")
        cluster.stop()
    console.say("local cluster stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
