"""The local-cluster launcher behind ``make run``.

Starts the daemons of a development cluster on loopback with embedded defaults, data under
``./var/``, and their logs on this console, each line whole and prefixed with the daemon's name
(``n0``, ``broker-a@10911``). Once the controllers elected a master for the broker group and
every broker's own role agrees with them, it prints one table (process, PID, address, broker id,
role, metrics port) and the ``rmqctl`` lines to try, the same as the README's.

A daemon that dies is reported (name, exit status) and the others keep running, so a failover
can be watched; ``r`` and Enter on this console restarts every dead daemon. The daemons die with
the launcher however it ends: Ctrl-C stops them cleanly, in an order that leaves nobody
complaining (the slaves, then the master, then the controllers: SIGTERM, then wait), also when
its output goes to a pipe that Ctrl-C closed (``make run | tee run.log``); if the launcher itself
is killed, the kernel kills each daemon (a parent-death signal, Linux). Before starting it
checks every port the cluster needs and refuses (exit status 2, one line naming the port and the
process holding it) when one is taken.

``--secure`` turns on authentication and TLS on every port: it makes the auth key, a CA and a
certificate under ``var/secure`` (``deploy/security.sh``), creates a super user and writes its
credentials to ``var/secure/admin.toml``; ``var/secure/env`` sets the variables rmqctl reads.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("RMQ_VAR", ROOT / "var"))
# The daemons and rmqctl run as ``python -m`` from the repository root: the code of this tree,
# whichever checkout the virtualenv was installed from.
PYTHON_M = [sys.executable, "-m"]
sys.path.insert(0, str(ROOT))

from remoting.ports import PortUnavailable, check_port_free  # noqa: E402

CONTROLLERS = {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
CONTROLLER_PEERS = ";".join(f"{node_id}-{address}" for node_id, address in CONTROLLERS.items())
CONTROLLER_ADDRESSES = ";".join(CONTROLLERS.values())

# One broker group of three replicas: (listen port, HA port, metrics port) each; the gRPC
# endpoint listens on listen port + 2.
BROKER_GROUP = "broker-a"
BROKERS = [(10911, 10912, 9300), (10921, 10922, 9301), (10931, 10932, 9302)]
CONTROLLER_METRICS_BASE = 9200

#: The console line that restarts every dead daemon.
RESTART_KEY = "r"

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

#: The line secure mode prints after the first hint (README.md, "Secure mode", shows it).
SECURE_HINT = "source {env}   # secure mode: the super user's credentials file and the CA"


def hints(master_metrics_port: int, security: Security | None = None) -> str:
    """The lines to try, with the master's metrics port in the curl line."""
    lines = HINTS.format(
        addresses=CONTROLLER_ADDRESSES, group=BROKER_GROUP, metrics_port=master_metrics_port
    ).splitlines()
    if security is not None:
        lines.insert(1, SECURE_HINT.format(env=shown_path(security.env_file)))
    return "\n".join(lines)


def shown_path(path: Path) -> str:
    """``path`` relative to the repository root when under it (the hints run from there)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


class Console:
    """The launcher's stdout, shared by every daemon's output: whole lines, each prefixed with
    the daemon's name, written one at a time. Once the reader went away (``make run | tee``, and
    Ctrl-C ended tee), output goes to /dev/null: the daemons' pipes are still drained, so none
    blocks on a full pipe while it stops, and the launcher goes on stopping them."""

    def __init__(self, out: IO[str], width: int) -> None:
        self.out = out
        self.width = width
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._lock:
            self._write(text if text.endswith("\n") else text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (BrokenPipeError, ValueError):
            self._to_devnull()

    def _to_devnull(self) -> None:
        # The pending bytes of the broken stream go to /dev/null too (no "Exception ignored"
        # at exit): the file descriptor itself is pointed there.
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.out.fileno())
        except (OSError, ValueError):
            self.out = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the launcher
        finally:
            os.close(devnull)
        try:
            self.out.flush()
        except (OSError, ValueError):
            self.out = open(os.devnull, "w")  # noqa: SIM115

    def pump(self, name: str, stream: IO[bytes]) -> threading.Thread:
        """Copy a daemon's output, line by line, until it closes (the daemon exited)."""

        def copy() -> None:
            prefix = f"{name:<{self.width}} | "
            with stream:
                for raw in iter(stream.readline, b""):
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    with self._lock:
                        self._write(prefix + line + "\n")

        thread = threading.Thread(target=copy, name=f"pump-{name}", daemon=True)
        thread.start()
        return thread


PR_SET_PDEATHSIG = 1
# Loaded before any fork: the child between fork and exec only calls into it.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send the child SIGKILL when this process ends,
    however it ends (kill -9 included); None where there is no such thing (not Linux). The
    signal follows the thread that forked the child: only the main thread starts daemons.

    SIGKILL, not SIGTERM: a launcher that ends this way did not stop them in order, and their
    output pipe is closed, so a clean stop could log nothing (a controller was seen not to
    finish one); they recover at the next start as after any crash."""
    if _LIBC is None:
        return None
    parent = os.getpid()
    libc = _LIBC

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Security:
    """The files of secure mode, under ``<var>/secure``. (A plain class: tests load this file
    with importlib, outside sys.modules, where a dataclass cannot be made.)"""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    @property
    def auth_key(self) -> Path:
        return self.dir / "auth.key"

    @property
    def ca(self) -> Path:
        return self.dir / "tls" / "ca.crt"

    @property
    def cert(self) -> Path:
        return self.dir / "tls" / "node.crt"

    @property
    def key(self) -> Path:
        return self.dir / "tls" / "node.key"

    @property
    def credentials_file(self) -> Path:
        return self.dir / "admin.toml"

    @property
    def env_file(self) -> Path:
        return self.dir / "env"

    @property
    def controller_config(self) -> Path:
        return self.dir / "controller.toml"

    @property
    def broker_config(self) -> Path:
        return self.dir / "broker.toml"

    def settings(self) -> str:
        """The keys every controller and broker of secure mode sets."""
        return (
            "auth_enabled = true\n"
            f"auth_key_file = {json.dumps(str(self.auth_key.resolve()))}\n"
            "tls_enabled = true\n"
            f"tls_cert = {json.dumps(str(self.cert.resolve()))}\n"
            f"tls_key = {json.dumps(str(self.key.resolve()))}\n"
            f"tls_ca_file = {json.dumps(str(self.ca.resolve()))}\n"
            "tls_verify_client = true\n"
        )

    def cluster_rmqctl_args(self) -> list[str]:
        """rmqctl's options to act as the cluster itself (a super user, with the client
        certificate mutual TLS asks of it): the launcher's own requests."""
        return [
            "--auth-key-file", str(self.auth_key),
            "--ca-file", str(self.ca),
            "--cert", str(self.cert),
            "--key", str(self.key),
        ]  # fmt: skip


def make_security_files(
    security: Security, broker_config: Path | None, controller_config: Path | None = None
) -> list[str]:
    """The auth key, CA and certificate (``deploy/security.sh``, which keeps any that exist),
    then the daemons' config files: what security.sh printed."""
    argv = [
        "bash", str(ROOT / "deploy" / "security.sh"), "--dir", str(security.dir),
        "--address", "127.0.0.1", "--address", "localhost", "--name", "localhost",
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise LaunchRefused(f"deploy/security.sh failed: {done.stderr.strip()}")
    # The security keys first: keys after a [table] of the operator's file would land in it.
    for merged, extra in (
        (security.controller_config, controller_config),
        (security.broker_config, broker_config),
    ):
        merged.write_text(security.settings() + (extra.read_text() if extra is not None else ""))
    return done.stdout.splitlines()


class LaunchRefused(Exception):
    """The cluster cannot start (a port taken, files that cannot be made): one line, exit 2."""


class LocalCluster:
    """The daemons of the development cluster as child processes, ended by PID."""

    def __init__(
        self,
        var: Path,
        *,
        broker_config: Path | None = None,
        controller_config: Path | None = None,
        log_format: str = "console",
        log_dir: Path | None = None,
        console: Console | None = None,
        security: Security | None = None,
    ) -> None:
        """``log_dir``: each daemon's output goes to ``<name>.log`` there; else to ``console``
        (prefixed with the daemon's name), else to this process's own stdout and stderr.
        ``security``: the daemons run with authentication and TLS on (its files made)."""
        self.var = var
        self.log_dir = log_dir
        self.console = console
        self.broker_config = broker_config
        self.controller_config = controller_config
        self.log_format = log_format
        self.security = security
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._pumps: list[threading.Thread] = []

    @property
    def rmqctl_args(self) -> list[str]:
        """What the launcher's own rmqctl calls add (secure mode: act as the cluster)."""
        return self.security.cluster_rmqctl_args() if self.security is not None else []

    def controller_argv(self, index: int, node_id: str) -> list[str]:
        if self.security is not None:
            config = ["--config", str(self.security.controller_config)]
        else:
            config = ["--config", str(self.controller_config)] if self.controller_config else []
        return [
            *PYTHON_M, "controller",
            *config,
            "--id", node_id,
            "--peers", CONTROLLER_PEERS,
            "--data-dir", str(self.var / f"controller-{node_id}"),
            "--metrics-port", str(CONTROLLER_METRICS_BASE + index),
            "--log-format", self.log_format,
        ]  # fmt: skip

    def broker_argv(self, index: int) -> list[str]:
        listen, ha, metrics = BROKERS[index]
        if self.security is not None:
            config = ["--config", str(self.security.broker_config)]
            # gRPC over TLS only, on the port plaintext gRPC has otherwise.
            grpc = ["--grpc-listen", "0", "--grpc-tls-listen", f"127.0.0.1:{listen + 2}"]
        else:
            config = ["--config", str(self.broker_config)] if self.broker_config else []
            grpc = []
        return [
            *PYTHON_M, "broker",
            *config,
            "--cluster", "DefaultCluster",
            "--broker-name", BROKER_GROUP,
            "--listen", f"127.0.0.1:{listen}",
            "--ha-port", str(ha),
            *grpc,
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

    def prepare(self) -> list[str]:
        """Before the first start: refuse (LaunchRefused) if a port is taken, and in secure
        mode make the security files. Returns what is worth telling the operator."""
        check_ports()
        self.var.mkdir(parents=True, exist_ok=True)
        if self.security is None:
            return []
        return make_security_files(self.security, self.broker_config, self.controller_config)

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
        # Own session: the terminal's Ctrl-C reaches only us; we stop children in order. The
        # parent-death signal ends them if we die without doing so.
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=die_with_this_process(),  # only prctl: nothing that takes a lock
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

    def alive(self, name: str) -> bool:
        proc = self.children.get(name)
        return proc is not None and proc.poll() is None

    def kill9(self, name: str) -> None:
        proc = self.children[name]
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM in stages: the slaves, then the master (so no slave sees its master go), then
        the controllers; SIGKILL to whoever is past the deadline."""
        deadline = time.monotonic() + timeout
        brokers = [broker_process_name(i) for i in range(len(BROKERS))]
        live_brokers = [b for b in brokers if self.alive(b)]
        master = master_process_name(self.rmqctl_args) if live_brokers else None
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


def ports() -> list[tuple[int, str]]:
    """Every port the cluster listens on, with what it is for."""
    out: list[tuple[int, str]] = []
    for index, (node_id, address) in enumerate(CONTROLLERS.items()):
        out.append((int(address.rpartition(":")[2]), f"controller {node_id}"))
        out.append((CONTROLLER_METRICS_BASE + index, f"controller {node_id} metrics"))
    for index, (listen, ha, metrics) in enumerate(BROKERS):
        name = broker_process_name(index)
        out += [(listen, name), (ha, f"{name} HA"), (listen + 2, f"{name} gRPC")]
        out.append((metrics, f"{name} metrics"))
    return out


def check_ports() -> None:
    """LaunchRefused naming the first port of the cluster that cannot be bound, and the process
    holding it when this host says which."""
    for port, what in ports():
        try:
            check_port_free("127.0.0.1", port, what)
        except PortUnavailable:
            holder = port_holder(port)
            by = f"by {holder}" if holder else "(by a process of another user, or in use)"
            raise LaunchRefused(
                f"port {port} ({what}) is in use {by}: is another `make run` or `make demo` "
                "up? Stop it first"
            ) from None


def port_holder(port: int) -> str | None:
    """``PID 1234 (python -m controller ...)`` for the process with a socket bound to ``port``
    (a listener first), read from /proc; None when it cannot be seen (another user's, not
    Linux)."""
    inodes: list[tuple[bool, str]] = []
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table_path).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or int(fields[1].rpartition(":")[2], 16) != port:
                continue
            inodes.append((fields[3] != "0A", fields[9]))  # 0A: LISTEN, sorted first
    wanted = [f"socket:[{inode}]" for _, inode in sorted(inodes) if inode != "0"]
    for target in wanted:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fds = list((proc / "fd").iterdir())
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(fd) != target:
                        continue
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                command = " ".join(a.decode(errors="replace") for a in cmdline if a)
                if len(command) > 120:
                    command = command[:117] + "..."
                return f"PID {proc.name} ({command})"
    return None


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


def rmqctl(
    *args: str, options: Sequence[str] = (), timeout: float = 10.0
) -> subprocess.CompletedProcess[str] | None:
    """``rmqctl OPTIONS ARGS`` against the local controllers (None past ``timeout``)."""
    try:
        return subprocess.run(
            [*PYTHON_M, "rmqctl", *options, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, RMQCTL_ADDRESSES=CONTROLLER_ADDRESSES),
            start_new_session=True,  # the terminal's Ctrl-C is ours to handle
        )
    except subprocess.TimeoutExpired:
        return None


def rmqctl_json(*args: str, options: Sequence[str] = (), timeout: float = 10.0) -> Any:
    """``rmqctl --json ARGS`` against the local controllers: the document, or None on failure."""
    done = rmqctl("--json", *args, options=options, timeout=timeout)
    if done is None or done.returncode != 0:
        return None
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def master_process_name(options: Sequence[str] = ()) -> str | None:
    """The process name of the broker group's master, as the controllers see it now."""
    doc = rmqctl_json("getSyncStateSet", "-b", BROKER_GROUP, options=options, timeout=5.0)
    address = doc.get("masterAddress") if isinstance(doc, dict) else None
    for index in range(len(BROKERS)):
        if address == broker_address(index):
            return broker_process_name(index)
    return None


def broker_role(index: int) -> tuple[str, int] | None:
    """(role, master epoch) as the broker itself says on its metrics port (``master``,
    ``slave`` or ``none``); None while it does not answer (down, or still recovering)."""
    url = f"http://127.0.0.1:{BROKERS[index][2]}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = resp.read().decode()
    except (OSError, ValueError):
        return None
    role, epoch = None, None
    for line in text.splitlines():
        if line.startswith("rmq_broker_role{") and line.endswith(" 1.0"):
            role = line.split('role="', 1)[1].split('"', 1)[0]
        elif line.startswith("rmq_broker_master_epoch{"):
            epoch = int(float(line.rsplit(" ", 1)[1]))
    return (role, epoch) if role is not None and epoch is not None else None


def roles_agree(group: dict[str, Any], live: Sequence[int]) -> bool:
    """Whether each live broker (by index) says of itself what the controllers say of it: the
    master that it is master at their epoch, every other that it is a slave at that epoch."""
    master, epoch = group.get("masterAddress"), group.get("masterEpoch")
    for index in live:
        want = "master" if broker_address(index) == master else "slave"
        if broker_role(index) != (want, epoch):
            return False
    return True


def cluster_table(pids: dict[str, int], options: Sequence[str] = ()) -> tuple[str, int] | None:
    """Once the controllers have a leader, the broker group a master with every replica in its
    SyncStateSet, and every broker's own role agrees with the controllers': the table of every
    process, and the master's metrics port."""
    meta = rmqctl_json("getControllerMetaData", options=options)
    group = rmqctl_json("getSyncStateSet", "-b", BROKER_GROUP, options=options)
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
    # The controllers' answer survives a restart before the brokers are back (recovering, or
    # not started): only a broker's own word says it acts on it.
    if not roles_agree(group, range(len(BROKERS))):
        return None
    rows: list[list[str]] = []
    for index, (node_id, address) in enumerate(CONTROLLERS.items()):
        role = "controller, leader" if node_id == meta["leaderId"] else "controller, follower"
        pid = str(pids.get(node_id, "-"))
        rows.append([node_id, pid, address, "-", role, str(CONTROLLER_METRICS_BASE + index)])
    master_port = 0
    for index, address in enumerate(addresses):
        broker_id = replicas[address]["brokerId"]
        role = "master" if broker_id == master_id else "slave"
        metrics = BROKERS[index][2]
        if role == "master":
            master_port = metrics
        name = broker_process_name(index)
        pid = str(pids.get(name, "-"))
        rows.append([name, pid, address, str(broker_id), role, str(metrics)])
    headers = ["process", "pid", "address", "broker id", "role", "metrics port"]
    return table(headers, rows), master_port


def group_state(live: Sequence[int], options: Sequence[str] = ()) -> tuple[str, bool] | None:
    """After a death or a restart, what a failover came to: one line on the broker group once
    the controllers and the live brokers (by index) agree on its master (None before), and
    whether it is settled (every live broker in sync)."""
    group = rmqctl_json("getSyncStateSet", "-b", BROKER_GROUP, options=options, timeout=5.0)
    if not isinstance(group, dict) or not group.get("masterAddress"):
        return None
    master = next(
        (i for i in range(len(BROKERS)) if broker_address(i) == group["masterAddress"]), None
    )
    if master is None or master not in live or not roles_agree(group, live):
        return None
    by_id = {r["brokerId"]: r["address"] for r in group.get("replicas") or []}
    in_sync_addresses = {by_id.get(b) for b in group.get("syncStateSet") or []}
    in_sync = [i for i in range(len(BROKERS)) if broker_address(i) in in_sync_addresses]
    line = (
        f"local cluster: {BROKER_GROUP}'s master is {broker_process_name(master)} at epoch "
        f"{group.get('masterEpoch')} (the controllers and the brokers agree); in sync: "
        f"{', '.join(broker_process_name(i) for i in in_sync)}"
    )
    return line, set(in_sync) == set(live)


def table(headers: list[str], rows: list[list[str]]) -> str:
    cells = [headers, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


#: The one line saying this cluster is open (README.md and docs/operations.md say how to close it).
OPEN_NOTICE = (
    "Security off: authentication and TLS are off, anyone on this host may connect (a first "
    'try only; `make run SECURE=1` turns both on, docs/operations.md "Security").'
)

SECURE_NOTICE = (
    "Security on: authentication and TLS (mutual inside the cluster) on every port but the "
    "metrics ports; the super user's credentials in {credentials}, the CA in {ca}."
)


def banner(var: Path, security: Security | None = None) -> str:
    notice = (
        OPEN_NOTICE
        if security is None
        else SECURE_NOTICE.format(
            credentials=shown_path(security.credentials_file), ca=shown_path(security.ca)
        )
    )
    return (
        f"Local cluster starting (data under {var}): controllers n0..n2 and broker group\n"
        f"{BROKER_GROUP} of three replicas. Their logs follow, each line prefixed with its "
        "process;\nonce a master is elected, a table of the processes and the commands to try. "
        "Ctrl-C stops it.\n"
        f"{notice}"
    )


def ready_text(
    cluster_table: str, master_metrics_port: int, security: Security | None = None
) -> str:
    lines = "\n".join(f"  {line}" for line in hints(master_metrics_port, security).splitlines())
    return (
        f"\nLocal cluster ready:\n\n{cluster_table}\n\nTry, in another terminal:\n\n{lines}\n\n"
        "A failover to watch: `kill -9` the master's PID; this console reports it, the others "
        "keep\nrunning and elect a new master; then type r and Enter here to restart it (it "
        "rejoins as a slave).\n"
    )


def death_text(name: str, code: int) -> str:
    how = f"status {code}"
    if code == 2:  # a daemon's refused start: a restart refuses the same way until fixed
        how += " (it refused to start: its last line above says why)"
    if code < 0:
        try:
            how += f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return (
        f"local cluster: {name} exited with {how}; the others keep running. "
        f"Type {RESTART_KEY} and Enter to restart every dead daemon, Ctrl-C to stop."
    )


def read_requests(stream: IO[str], requests: queue.Queue[str]) -> threading.Thread:
    """A thread handing each line typed on the console to the main loop (which alone starts
    daemons: the parent-death signal follows the thread that started a child)."""

    def read() -> None:
        while True:
            try:
                line = stream.readline()
            except OSError:  # EIO: a background job reading its terminal (SIGTTIN ignored)
                time.sleep(1.0)
                continue
            except ValueError:  # closed
                return
            if not line:  # end of input: nobody will type
                return
            requests.put(line.strip())

    thread = threading.Thread(target=read, name="console-input", daemon=True)
    thread.start()
    return thread


def create_super_user(
    security: Security,
    timeout: float = 60.0,
    say: Callable[[str], None] = print,
    stopping: Callable[[], bool] = lambda: False,
) -> None:
    """Create the super user ``admin`` as the cluster (once: an existing credentials file is
    kept) and write its credentials file and the env file rmqctl's variables come from."""
    creds = security.credentials_file
    if not creds.exists():
        secret = secrets.token_urlsafe(24)
        deadline = time.monotonic() + timeout
        while True:
            create = ["createUser", "-u", "admin", "-t", "Super", "-p", secret]
            done = rmqctl(*create, options=security.cluster_rmqctl_args())
            if done is not None and done.returncode != 0 and "exist" in done.stderr:
                # The user outlived its file (var/secure/admin.toml removed): a new secret.
                update = ["updateUser", "-u", "admin", "-p", secret]
                done = rmqctl(*update, options=security.cluster_rmqctl_args())
            if done is not None and done.returncode == 0:
                break
            if stopping():  # Ctrl-C while the controllers were not answering yet
                return
            if time.monotonic() >= deadline:
                why = done.stderr.strip() if done is not None else "timed out"
                raise LaunchRefused(f"could not create the super user admin: {why}")
            time.sleep(0.5)
        fd = os.open(creds, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f'access_key = "admin"\nsecret_key = "{secret}"\n')
        say(f"local cluster: super user admin created; its credentials are in {creds}")
    security.env_file.write_text(
        "# secure mode of make run: source this file, then use rmqctl as the super user admin\n"
        f'export RMQCTL_ADDRESSES="{CONTROLLER_ADDRESSES}"\n'
        f'export RMQ_CREDENTIALS_FILE="{creds.resolve()}"\n'
        f'export RMQ_CA_FILE="{security.ca.resolve()}"\n'
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the local development cluster (make run). A daemon that dies is "
        f"reported and the others keep running; {RESTART_KEY} and Enter restarts the dead ones."
    )
    parser.add_argument("--var", type=Path, default=VAR, help="data directory (default ./var)")
    parser.add_argument("--broker-config", type=Path, help="TOML file every broker reads first")
    parser.add_argument(
        "--controller-config", type=Path, help="TOML file every controller reads first"
    )
    parser.add_argument("--log-format", default="console", choices=["console", "json"])
    parser.add_argument(
        "--secure",
        action="store_true",
        help="authentication and TLS on every port: a CA, certificates and a super user under "
        "VAR/secure (make run SECURE=1)",
    )
    args = parser.parse_args(argv)
    var: Path = args.var
    security = Security(var / "secure") if args.secure else None
    names = [name for name, _ in LocalCluster(var).processes()]
    console = Console(sys.stdout, max(len(n) for n in names))
    cluster = LocalCluster(
        var,
        broker_config=args.broker_config,
        controller_config=args.controller_config,
        log_format=args.log_format,
        console=console,
        security=security,
    )
    try:
        for line in cluster.prepare():
            console.say(f"local cluster: {line}")
    except LaunchRefused as exc:
        print(f"local cluster: {exc}", file=sys.stderr, flush=True)
        return 2
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)  # the terminal closed
    # In the background (make run &) a read of the terminal would stop the whole launcher;
    # ignored, the read fails instead and is tried again until it runs in the foreground.
    signal.signal(signal.SIGTTIN, signal.SIG_IGN)
    console.say(banner(var, security))
    requests: queue.Queue[str] = queue.Queue()
    read_requests(sys.stdin, requests)
    status = 0
    ready = False
    started = time.monotonic()
    reminded = False
    dead: set[str] = set()
    watching = False  # after a death or a restart: until the group's state is told
    watch_since = 0.0
    last_state = ""
    next_look = 0.0
    try:
        cluster.start()
        if security is not None:
            create_super_user(security, say=console.say, stopping=lambda: stopping)
        while not stopping:
            for name, code in cluster.exited():
                if name not in dead:
                    dead.add(name)
                    watching, watch_since = True, time.monotonic()
                    console.say(death_text(name, code))
            while not requests.empty():
                typed = requests.get()
                if typed.lower() != RESTART_KEY:
                    if typed:
                        console.say(f"local cluster: {RESTART_KEY} and Enter restarts the dead")
                    continue
                if not dead:
                    console.say("local cluster: every daemon is running; nothing to restart")
                    continue
                for name in sorted(dead, key=names.index):  # controllers before brokers
                    cluster.start(name)
                    pid = cluster.children[name].pid
                    console.say(f"local cluster: restarting {name} (PID {pid})")
                dead.clear()
                watching, watch_since = True, time.monotonic()
            now = time.monotonic()
            pids = {n: p.pid for n, p in cluster.children.items() if p.poll() is None}
            if not ready:
                found = cluster_table(pids, cluster.rmqctl_args)
                if found is not None:
                    console.say(ready_text(*found, security=security))
                    ready = True
                    watching = False
                elif not reminded and now - started > 30:
                    reminded = True
                    console.say(
                        f"local cluster: {BROKER_GROUP} has no master with every replica in sync "
                        f"yet, or a broker does not yet say the role the controllers give it; "
                        f"`rmqctl getSyncStateSet -b {BROKER_GROUP}` shows where it stands"
                    )
            elif watching and now >= next_look:
                # Every second for a minute, then every 5 s (a group that cannot elect).
                next_look = now + (1.0 if now - watch_since < 60 else 5.0)
                live = [i for i in range(len(BROKERS)) if broker_process_name(i) in pids]
                state = group_state(live, cluster.rmqctl_args)
                if state is not None and state[0] != last_state:
                    console.say(state[0])
                    last_state = state[0]
                watching = state is None or not state[1]
            time.sleep(0.2 if not ready else 0.3)
    except LaunchRefused as exc:
        console.say(f"local cluster: {exc}")
        status = 2
    finally:
        console.say("local cluster: stopping (slaves, master, then controllers)")
        cluster.stop()
    console.say("local cluster stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
