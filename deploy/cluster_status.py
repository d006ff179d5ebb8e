"""What the launcher tells the operator about the local cluster: the banner, the table of
processes once the group has a master that every broker agrees with, the lines to try (the
README's), a daemon's death, and what a failover came to.

Where the cluster stands is read as an operator would: ``rmqctl`` against the controllers, and
each broker's own role on its metrics port.
"""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy.cluster_layout import (
    BROKER_GROUP,
    BROKERS,
    CONTROLLER_ADDRESSES,
    CONTROLLER_METRICS_BASE,
    CONTROLLERS,
    ROOT,
    broker_address,
    broker_process_name,
    rmqctl_json,
)
from deploy.secure_mode import Security

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


def cluster_table(
    pids: dict[str, int], options: Sequence[str] = (), exited: Mapping[str, int] | None = None
) -> tuple[str, int] | None:
    """Once the controllers have a leader, the broker group a master with every running
    replica in its SyncStateSet, and every running broker's own role agrees with the
    controllers': the table of every process, and the master's metrics port. ``exited``: the
    daemons that exited, by name, with their status (their rows say so; a make run where one
    replica refused to start printed no table, so no PID, at all)."""
    exited = exited or {}
    meta = rmqctl_json("getControllerMetaData", options=options)
    group = rmqctl_json("getSyncStateSet", "-b", BROKER_GROUP, options=options)
    if not isinstance(meta, dict) or not isinstance(group, dict) or not meta.get("leaderId"):
        return None
    replicas = {r["address"]: r for r in group.get("replicas") or []}
    in_sync = set(group.get("syncStateSet") or [])
    master_id = group.get("masterBrokerId")
    addresses = [broker_address(i) for i in range(len(BROKERS))]
    running = [i for i in range(len(BROKERS)) if broker_process_name(i) not in exited]
    master = group.get("masterAddress")
    if (
        not running
        or master not in {addresses[i] for i in running}
        or any(
            addresses[i] not in replicas or replicas[addresses[i]]["brokerId"] not in in_sync
            for i in running
        )
    ):
        return None
    # The controllers' answer survives a restart before the brokers are back (recovering, or
    # not started): only a broker's own word says it acts on it.
    if not roles_agree(group, running):
        return None
    rows: list[list[str]] = []
    for index, (node_id, address) in enumerate(CONTROLLERS.items()):
        role = "controller, leader" if node_id == meta["leaderId"] else "controller, follower"
        if node_id in exited:
            role = _exited(exited[node_id])
        pid = str(pids.get(node_id, "-"))
        rows.append([node_id, pid, address, "-", role, str(CONTROLLER_METRICS_BASE + index)])
    master_port = 0
    for index, address in enumerate(addresses):
        known = replicas.get(address)
        broker_id = known["brokerId"] if known else None
        role = "master" if broker_id == master_id else "slave"
        metrics = BROKERS[index][2]
        if role == "master":
            master_port = metrics
        name = broker_process_name(index)
        if name in exited:
            role = _exited(exited[name])
        pid = str(pids.get(name, "-"))
        shown_id = "-" if broker_id is None else str(broker_id)
        rows.append([name, pid, address, shown_id, role, str(metrics)])
    headers = ["process", "pid", "address", "broker id", "role", "metrics port"]
    return table(headers, rows), master_port


def _exited(code: int) -> str:
    return f"exited (status {code}), {RESTART_KEY} restarts it"


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
