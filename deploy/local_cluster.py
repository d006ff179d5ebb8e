"""The local-cluster launcher behind ``make run``.

Starts the daemons of a development cluster on loopback with embedded defaults, data under
``./var/``, logs to this console, and stops them cleanly (SIGTERM, then wait) on Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("RMQ_VAR", ROOT / "var"))
BIN = Path(sys.executable).parent

BROKER_LISTEN = "127.0.0.1:10911"
CONTROLLERS = {"n0": "127.0.0.1:9878", "n1": "127.0.0.1:9868", "n2": "127.0.0.1:9858"}
CONTROLLER_PEERS = ";".join(f"{node_id}-{address}" for node_id, address in CONTROLLERS.items())
CONTROLLER_ADDRESSES = ";".join(CONTROLLERS.values())


def controllers() -> list[tuple[str, list[str]]]:
    return [
        (
            f"controller-{node_id}",
            [
                str(BIN / "rmq-controller"),
                "--id", node_id,
                "--peers", CONTROLLER_PEERS,
                "--data-dir", str(VAR / f"controller-{node_id}"),
                "--metrics-port", str(9200 + i),
                "--log-format", "console",
            ],
        )
        for i, node_id in enumerate(CONTROLLERS)
    ]  # fmt: skip


def processes() -> list[tuple[str, list[str]]]:
    broker = [
        str(BIN / "rmq-broker"),
        "--cluster", "DefaultCluster",
        "--broker-name", "broker-a",
        "--listen", BROKER_LISTEN,
        "--data-dir", str(VAR / "broker-a"),
        "--metrics-port", "9300",
        "--log-format", "console",
    ]  # fmt: skip
    return [*controllers(), ("broker-a", broker)]


def banner() -> str:
    a = BROKER_LISTEN
    c = CONTROLLER_ADDRESSES
    return f"""
Local cluster starting (data under {VAR}). Try, in another terminal:

  .venv/bin/rmqctl -a {a} updateTopic -t TopicTest -q 4
  .venv/bin/rmqctl -a {a} sendMessage -t TopicTest -p "hello" --count 10
  .venv/bin/rmqctl --json -a {a} consumeMessage -t TopicTest -g demo-group --count 10 --timeout 5
  .venv/bin/rmqctl -a {a} topicRoute -t TopicTest
  .venv/bin/rmqctl -a {a} clusterList
  curl -s http://127.0.0.1:9300/metrics | grep rmq_broker_messages_in_total

Controllers (n0..n2, Raft group; metrics on 9200..9202):

  .venv/bin/rmqctl -a "{c}" getControllerMetaData
  .venv/bin/rmqctl --json -a "{c}" getControllerConfig
  curl -s http://127.0.0.1:9200/metrics | grep rmq_controller_raft_term

Ctrl-C stops the cluster cleanly.
"""


def main() -> int:
    VAR.mkdir(parents=True, exist_ok=True)
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(banner(), flush=True)
    for name, argv in processes():
        # Own process group: the terminal's Ctrl-C reaches only us, and we stop children in order.
        children.append((name, subprocess.Popen(argv, cwd=ROOT, start_new_session=True)))
    status = 0
    while not stopping:
        for name, proc in children:
            if proc.poll() is not None:
                print(
                    f"local cluster: {name} exited with status {proc.returncode}; stopping",
                    flush=True,
                )
                stopping = True
                status = 1
        time.sleep(0.2)
    for _name, proc in reversed(children):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for name, proc in reversed(children):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"local cluster: {name} did not stop in time; killing it", flush=True)
            proc.kill()
            proc.wait()
    print("local cluster stopped", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
