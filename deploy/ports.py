"""Before the local cluster starts: every port it needs, checked free, and who holds one that
is not (``make run`` and ``make demo`` refuse to start then, naming the port and the process)."""

from __future__ import annotations

import os
from pathlib import Path

from deploy.cluster_layout import (
    BROKERS,
    CONTROLLER_METRICS_BASE,
    CONTROLLERS,
    LaunchRefused,
    broker_process_name,
)
from remoting.ports import PortUnavailable, check_port_free


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
