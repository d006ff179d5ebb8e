"""The local cluster's daemons as child processes of the launcher, and their output.

:class:`LocalCluster` starts each daemon (its own session; a parent-death signal ends it with
the launcher), tells which exited, and stops them in an order that leaves nobody complaining.
Every broker runs from the same config file (:meth:`LocalCluster.broker_config_file`), which
none writes: a live change (``rmqctl updateBrokerConfig``) is kept in the broker's own data
directory, ``<var>/broker-a-<n>/config/liveConfig.json``, across restarts.
:class:`Console` gives every daemon's output to the launcher's stdout, line by line, prefixed
with the daemon's name.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from deploy.cluster_layout import (
    BROKER_GROUP,
    BROKERS,
    CONSOLE_LISTEN,
    CONTROLLER_ADDRESSES,
    CONTROLLER_METRICS_BASE,
    CONTROLLER_PEERS,
    CONTROLLERS,
    PYTHON_M,
    ROOT,
    LaunchRefused,
    broker_process_name,
    wait_listening,
)
from deploy.cluster_status import master_process_name
from deploy.ports import check_ports
from deploy.secure_mode import Security, make_security_files


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
        web_console: bool = False,
    ) -> None:
        """``log_dir``: each daemon's output goes to ``<name>.log`` there; else to ``console``
        (prefixed with the daemon's name), else to this process's own stdout and stderr.
        ``security``: the daemons run with authentication and TLS on (its files made).
        ``web_console``: rmq-console runs beside them (make run), on :data:`CONSOLE_LISTEN`."""
        self.var = var
        self.log_dir = log_dir
        self.console = console
        self.broker_config = broker_config
        self.controller_config = controller_config
        self.log_format = log_format
        self.security = security
        self.web_console = web_console
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

    def broker_config_file(self) -> Path | None:
        """The file every broker runs from: secure mode's (its keys and then
        ``--broker-config``'s), else ``--broker-config``'s, else none (the defaults). Never
        written: live changes are kept in each broker's data directory."""
        return self.security.broker_config if self.security is not None else self.broker_config

    def broker_argv(self, index: int) -> list[str]:
        listen, ha, metrics = BROKERS[index]
        if self.security is not None:
            # gRPC over TLS only, on the port plaintext gRPC has otherwise.
            grpc = ["--grpc-listen", "0", "--grpc-tls-listen", f"127.0.0.1:{listen + 2}"]
        else:
            grpc = []
        config_file = self.broker_config_file()
        config = ["--config", str(config_file)] if config_file is not None else []
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

    def console_argv(self) -> list[str]:
        """rmq-console for the cluster (secure mode: signing as the cluster with its auth key,
        over TLS; the super user's credentials file is made only once the cluster is up)."""
        secure = (
            [
                "--auth-key-file", str(self.security.auth_key),
                "--cluster-ca-file", str(self.security.ca),
                "--cluster-cert-file", str(self.security.cert),
                "--cluster-key-file", str(self.security.key),
            ]
            if self.security is not None
            else []
        )  # fmt: skip
        return [
            *PYTHON_M, "console",
            "--controllers", CONTROLLER_ADDRESSES,
            "--listen", CONSOLE_LISTEN,
            *secure,
            "--log-format", self.log_format,
        ]  # fmt: skip

    def processes(self) -> list[tuple[str, list[str]]]:
        return [
            *((n, self.controller_argv(i, n)) for i, n in enumerate(CONTROLLERS)),
            *((broker_process_name(i), self.broker_argv(i)) for i in range(len(BROKERS))),
            *([("console", self.console_argv())] if self.web_console else []),
        ]

    def prepare(self) -> list[str]:
        """Before the first start: refuse (LaunchRefused) if a port is taken or a config file
        given does not exist, and in secure mode make the security files. Returns what is worth telling the operator."""
        check_ports()
        for given in (self.broker_config, self.controller_config):
            if given is not None and not given.is_file():
                raise LaunchRefused(f"{given}: no such file (a config file the daemons read)")
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
            if self.web_console:
                self._start_one("console")
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
