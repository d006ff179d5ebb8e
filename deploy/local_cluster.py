"""The local-cluster launcher behind ``make run``.

Starts the daemons of a development cluster on loopback with embedded defaults, data under
``./var/``, and their logs on this console, each line whole and prefixed with the daemon's name
(``n0``, ``broker-a@10911``), and the web console rmq-console beside them (``console``, its URL
``http://127.0.0.1:8080/`` printed at the start). Once the controllers elected a master for the
broker group and every broker's own role agrees with them, it prints one table (process, PID,
address, broker id, role, metrics port) and the ``rmqctl`` lines to try, the same as the
README's.

A daemon that dies is reported (name, exit status) and the others keep running, so a failover
can be watched; ``r`` and Enter on this console restarts every dead daemon. The daemons die with
the launcher however it ends: Ctrl-C stops them cleanly, in an order that leaves nobody
complaining (the slaves, then the master, then the controllers: SIGTERM, then wait), also when
its output goes to a pipe that Ctrl-C closed (``make run | tee run.log``); if the launcher itself
is killed, the kernel kills each daemon (a parent-death signal, Linux). Before starting it
checks every port the cluster needs and refuses (exit status 2, one line naming the port and the
process holding it) when one is taken.

Every broker runs from ``--broker-config`` (secure mode: ``var/secure/broker.toml``, which takes
its keys), or from the defaults without it, and never writes it: a live change (``rmqctl
updateBrokerConfig``) is kept in the broker's own data directory,
``<var>/broker-a-<n>/config/liveConfig.json``, so it survives a restart (``deploy/daemons.py``).

``--secure`` turns on authentication and TLS on every port: it makes the auth key, a CA and a
certificate under ``var/secure`` (``deploy/security.sh``), creates a super user and writes its
credentials to ``var/secure/admin.toml``; ``var/secure/env`` sets the variables rmqctl reads.

The launcher is built from ``deploy/cluster_layout.py`` (the fixed ports and names),
``deploy/ports.py`` (the ports checked before starting), ``deploy/daemons.py`` (the child
processes and their output), ``deploy/supervisor.py`` (the loop: deaths, restarts, status),
``deploy/cluster_status.py`` (what it prints) and ``deploy/secure_mode.py``; this file parses
the options and wires them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

# Run as ``python deploy/local_cluster.py`` (or loaded from its path by the tests): the
# repository root goes on sys.path for the deploy package and the daemons' code.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.cluster_layout import (
    BROKERS,
    CONSOLE_LISTEN,
    CONTROLLER_ADDRESSES,
    PYTHON_M,
    ROOT,
    LaunchRefused,
    broker_address,
    broker_process_name,
)
from deploy.cluster_status import RESTART_KEY, banner, hints
from deploy.daemons import Console, LocalCluster
from deploy.secure_mode import Security, make_security_files
from deploy.supervisor import Supervisor, read_requests

# What deploy/demo.py and the tests take from here.
__all__ = [
    "BROKERS",
    "CONTROLLER_ADDRESSES",
    "PYTHON_M",
    "ROOT",
    "LaunchRefused",
    "LocalCluster",
    "Security",
    "broker_address",
    "broker_process_name",
    "hints",
    "main",
    "make_security_files",
]

VAR = Path(os.environ.get("RMQ_VAR", ROOT / "var"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the local development cluster (make run). A daemon that dies is "
        f"reported and the others keep running; {RESTART_KEY} and Enter restarts the dead ones."
    )
    parser.add_argument("--var", type=Path, default=VAR, help="data directory (default ./var)")
    parser.add_argument(
        "--broker-config",
        type=Path,
        help="TOML file every broker runs from (never written: updateBrokerConfig keeps a live "
        "change in the broker's VAR/broker-a-N/config/liveConfig.json; a key whose value is "
        "changed here later wins over a live change of it at the next start)",
    )
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
    names = [name for name, _ in LocalCluster(var, web_console=True).processes()]
    console = Console(sys.stdout, max(len(n) for n in names))
    cluster = LocalCluster(
        var,
        broker_config=args.broker_config,
        controller_config=args.controller_config,
        log_format=args.log_format,
        console=console,
        security=security,
        web_console=True,
    )
    try:
        for line in cluster.prepare():
            console.say(f"local cluster: {line}")
    except LaunchRefused as exc:
        print(f"local cluster: {exc}", file=sys.stderr, flush=True)
        return 2
    supervisor = Supervisor(cluster, console, names)
    signal.signal(signal.SIGINT, supervisor.stop)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGHUP, supervisor.stop)  # the terminal closed
    # In the background (make run &) a read of the terminal would stop the whole launcher;
    # ignored, the read fails instead and is tried again until it runs in the foreground.
    signal.signal(signal.SIGTTIN, signal.SIG_IGN)
    console.say(banner(var, security))
    console.say(f"local cluster: the web console (rmq-console) serves http://{CONSOLE_LISTEN}/")
    read_requests(sys.stdin, supervisor.requests)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
