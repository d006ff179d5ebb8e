"""``make demo``: a failover you can watch, on a cluster of its own under ``var/demo``.

Starts three controllers and one broker group of three replicas (the ``make run`` layout), sends
messages with ``rmqctl``, kills the master with SIGKILL, shows the controllers electing a new
one from the SyncStateSet and the producer carrying on, brings the old master back (it truncates
to the consistent point and rejoins as a slave), then consumes every message. Each step prints
the ``rmqctl`` command it runs, so an operator sees exactly what they would type. It uses the
ports of ``make run``: while one is up (or anything else holds one of them) it refuses to start,
exit status 2, with one line naming the port and the process holding it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_cluster import (
    BROKERS,
    CONTROLLER_ADDRESSES,
    PYTHON_M,
    ROOT,
    LaunchRefused,
    LocalCluster,
    broker_address,
    broker_process_name,
)

TOPIC = "DemoTopic"
GROUP = "broker-a"


def rmqctl(*args: str, show: bool = True) -> str:
    """Run rmqctl against the demo cluster; print the command and its output when ``show``."""
    argv = [*PYTHON_M, "rmqctl", *args]
    if show:
        print(f"\n$ rmqctl {' '.join(args)}", flush=True)
    env = dict(os.environ, RMQCTL_ADDRESSES=CONTROLLER_ADDRESSES)
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"rmqctl {' '.join(args)} failed: {done.stderr.strip()}")
    if show:
        print(done.stdout.rstrip(), flush=True)
    return done.stdout


def sync_state() -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(
            rmqctl("--json", "getSyncStateSet", "-b", GROUP, show=False)
        )
    except (RuntimeError, ValueError):
        return None
    return doc


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def in_sync(doc: dict[str, Any] | None, size: int, not_master: str = "") -> bool:
    return bool(
        doc
        and doc.get("masterAddress") not in ("", None, not_master)
        and len(doc["syncStateSet"]) >= size
    )


def run(cluster: LocalCluster) -> None:
    step("starting 3 controllers and broker group broker-a (3 replicas)")
    cluster.start()
    doc = wait_for(lambda: (d := sync_state()) and in_sync(d, 3) and d, 60, "a full SyncStateSet")
    rmqctl("getSyncStateSet", "-b", GROUP)
    rmqctl("updateTopic", "-t", TOPIC, "-q", "4")
    wait_for(lambda: _try(lambda: rmqctl("topicRoute", "-t", TOPIC, show=False)), 30, "the route")
    rmqctl("sendMessage", "-t", TOPIC, "-p", "before-failover", "--count", "5")
    rmqctl(
        "--json", "sendMessage", "-t", TOPIC, "-p", "before-failover", "--count", "95", show=False
    )

    master = doc["masterAddress"]
    index = next(i for i in range(len(BROKERS)) if broker_address(i) == master)
    step(f"kill -9 the master {broker_process_name(index)} ({master}, epoch {doc['masterEpoch']})")
    killed_at = time.monotonic()
    cluster.kill9(broker_process_name(index))
    new = wait_for(lambda: (d := sync_state()) and in_sync(d, 1, master) and d, 30, "a new master")
    elected = time.monotonic() - killed_at
    wait_for(
        lambda: _try(lambda: rmqctl("sendMessage", "-t", TOPIC, "-p", "after", show=False)),
        30,
        "a write acknowledged by the new master",
    )
    first_write = time.monotonic() - killed_at
    print(
        f"new master {new['masterAddress']} at epoch {new['masterEpoch']}: elected after "
        f"{elected:.2f}s, first acknowledged write after {first_write:.2f}s",
        flush=True,
    )
    rmqctl("getSyncStateSet", "-b", GROUP)
    rmqctl(
        "--json", "sendMessage", "-t", TOPIC, "-p", "after-failover", "--count", "99", show=False
    )

    step(f"restart the old master {broker_process_name(index)}: it comes back as a slave")
    cluster.start(broker_process_name(index))
    wait_for(lambda: in_sync(sync_state(), 3), 60, "the old master back in the SyncStateSet")
    rmqctl("getSyncStateSet", "-b", GROUP)
    rmqctl("getBrokerEpoch", "-b", GROUP)

    step("consume everything: 200 acknowledged messages")
    out = rmqctl(
        "--json", "consumeMessage", "-t", TOPIC, "-g", "demo-checker",
        "--count", "200", "--timeout", "30", show=False,
    )  # fmt: skip
    seen = {
        (m["brokerName"], m["queueId"], m["queueOffset"]) for m in map(json.loads, out.splitlines())
    }
    print(f"consumed {len(seen)} distinct messages of 200 acknowledged", flush=True)
    if len(seen) != 200:
        raise RuntimeError(f"expected 200 messages, consumed {len(seen)}")


def _try(action: Callable[[], object]) -> bool:
    try:
        action()
    except RuntimeError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A failover to watch (make demo).")
    parser.add_argument(
        "--var", type=Path, default=ROOT / "var" / "demo", help="the demo's data directory"
    )
    parser.add_argument("--broker-config", type=Path, help="TOML file every broker reads first")
    args = parser.parse_args(argv)
    var: Path = args.var
    cluster = LocalCluster(
        var, broker_config=args.broker_config, log_format="json", log_dir=var / "logs"
    )
    try:
        # Before anything else: with `make run` up, its ports are taken, and the demo would
        # otherwise talk to that cluster.
        cluster.prepare()
    except LaunchRefused as exc:
        print(f"demo: {exc}", file=sys.stderr, flush=True)
        return 2
    shutil.rmtree(var, ignore_errors=True)  # the demo's own directory: every run starts empty

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds into the finally below, which stops every daemon

    signal.signal(signal.SIGTERM, interrupted)
    try:
        run(cluster)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"demo failed: {exc} (daemon logs under {var / 'logs'})", file=sys.stderr, flush=True)
        return 1
    finally:
        step("stopping the demo cluster")
        cluster.stop()
    print("demo done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
