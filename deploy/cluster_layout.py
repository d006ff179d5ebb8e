"""The local cluster's fixed layout on loopback, and how the launcher reaches it.

Three controllers (``n0``..``n2``) and one broker group of three replicas, each on fixed ports
(README.md lists them); the daemons and ``rmqctl`` run as ``python -m`` from the repository root.
:func:`rmqctl` and :func:`rmqctl_json` are the launcher's own requests to the cluster (status,
the stop order, secure mode's super user); :class:`LaunchRefused` is why it cannot start.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The daemons and rmqctl run as ``python -m`` from the repository root: the code of this tree,
# whichever checkout the virtualenv was installed from.
PYTHON_M = [sys.executable, "-m"]

CONTROLLERS = {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
CONTROLLER_PEERS = ";".join(f"{node_id}-{address}" for node_id, address in CONTROLLERS.items())
CONTROLLER_ADDRESSES = ";".join(CONTROLLERS.values())

# One broker group of three replicas: (listen port, HA port, metrics port) each; the gRPC
# endpoint listens on listen port + 2.
BROKER_GROUP = "broker-a"
BROKERS = [(10911, 10912, 9300), (10921, 10922, 9301), (10931, 10932, 9302)]
CONTROLLER_METRICS_BASE = 9200
# make run's web console (rmq-console), pointed at the controllers.
CONSOLE_LISTEN = "127.0.0.1:8080"


class LaunchRefused(Exception):
    """The cluster cannot start (a port taken, files that cannot be made): one line, exit 2."""


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
