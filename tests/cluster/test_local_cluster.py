"""``make run`` and ``make demo`` as an operator runs them: the launcher on its fixed loopback
ports (README.md), with a temp data directory and small segments.

These use the embedded ports (9858-9878, 10911-10932, 9200-9202, 9300-9302), so they fail, with
the port named, if a developer's ``make run`` is up on this machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.procs import ROOT, port_open, small_segments_config
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

# rmqctl of this tree (the virtualenv's console script may belong to another checkout).
RMQCTL = [sys.executable, "-m", "rmqctl"]
ADDRESSES = "127.0.0.1:9878;127.0.0.1:9868;127.0.0.1:9858"
PORTS = [9878, 9868, 9858, 10911, 10912, 10921, 10922, 10931, 10932]


@pytest.fixture
def free_embedded_ports() -> None:
    busy = [p for p in PORTS if port_open(p)]
    assert not busy, f"ports {busy} are in use (is `make run` up?); these tests need them"


def rmqctl(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RMQCTL_ADDRESSES=ADDRESSES)
    return subprocess.run(
        [*RMQCTL, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def launcher(tmp_path: Path, free_embedded_ports: None) -> Iterator[subprocess.Popen[str]]:
    config = small_segments_config(tmp_path, "broker")
    argv = [
        sys.executable, str(ROOT / "deploy" / "local_cluster.py"),
        "--var", str(tmp_path / "var"), "--broker-config", str(config),
    ]  # fmt: skip
    log = (tmp_path / "launcher.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    log.close()
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # The launcher's children are in their own sessions: end it and them by PID.
                proc.kill()
                proc.wait()


# What make run prints of its daemons: every line prefixed with one of these names.
PROCESSES = ["n0", "n1", "n2", "broker-a@10911", "broker-a@10921", "broker-a@10931"]
DAEMON_LINE = re.compile(r"^(\S+)\s+\| ")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[")
WHOLE_LINE = re.compile(r"^(n\d|broker-a@\d+)\s+\| " + TIMESTAMP.pattern)
# A warning or worse, as the console renderer and the standard library's logging print them.
TROUBLE = re.compile(
    r"\[(warning|error|critical|exception)\s*\]|\b(WARNING|ERROR|CRITICAL)\b|Traceback"
)


def readme_hints() -> list[str]:
    """The commands README.md gives to try against make run's cluster."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"In another terminal:\n\n```sh\n(.*?)```", text, re.S)
    assert block, "README.md: no sh block after 'In another terminal:'"
    return block.group(1).splitlines()


def ready_table(out: str) -> list[list[str]] | None:
    """The table make run prints once a master is elected (None before)."""
    found = re.search(r"\nLocal cluster ready:\n\n(process .*?)\n\n", out, re.S)
    if found is None:
        return None
    lines = found.group(1).splitlines()
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def full_sync_state_set() -> bool:
    done = rmqctl("--json", "getSyncStateSet", "-b", "broker-a")
    if done.returncode != 0:
        return False
    doc = json.loads(done.stdout)
    return bool(doc["masterAddress"]) and len(doc["syncStateSet"]) == 3


def test_make_run_serves_rmqctl_and_stops_cleanly_on_ctrl_c(
    launcher: subprocess.Popen[str], tmp_path: Path
) -> None:
    """make run's console: the table once a master is elected, the README's commands, every
    daemon line prefixed with its process, and no warning from start to Ctrl-C."""
    log = tmp_path / "launcher.log"
    rows = wait_until(
        lambda: ready_table(log.read_text()), "make run's table of processes", 60, interval=0.3
    )
    assert rows[0] == ["process", "address", "broker id", "role", "metrics port"]
    assert [r[0] for r in rows[1:]] == PROCESSES
    roles = [r[3] for r in rows[1:]]
    assert sorted(roles[:3]) == [
        "controller, follower",
        "controller, follower",
        "controller, leader",
    ]
    assert sorted(roles[3:]) == ["master", "slave", "slave"]
    assert sorted(r[2] for r in rows[4:]) == ["1", "2", "3"]  # the broker ids
    master_metrics = next(r[4] for r in rows[1:] if r[3] == "master")
    # The commands to try are the README's, but for the metrics port: the master's.
    printed = log.read_text().split("Try, in another terminal:\n\n", 1)[1].split("\n\n", 1)[0]
    readme = readme_hints()
    assert readme[-1].startswith("curl -s http://127.0.0.1:9300/metrics")
    readme[-1] = readme[-1].replace(":9300/", f":{master_metrics}/")
    assert [line.removeprefix("  ") for line in printed.splitlines()] == readme

    wait_until(full_sync_state_set, "a master with three replicas in sync", 60, interval=0.3)
    assert rmqctl("updateTopic", "-t", "TopicTest", "-q", "4").returncode == 0
    wait_until(
        lambda: rmqctl("topicRoute", "-t", "TopicTest").returncode == 0, "the topic route", 30
    )
    sent = rmqctl("--json", "sendMessage", "-t", "TopicTest", "-p", "hello", "--count", "10")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["sent"] == 10
    got = rmqctl(
        "--json", "consumeMessage", "-t", "TopicTest", "-g", "g", "--count", "10", "--timeout", "20"
    )
    assert got.returncode == 0, got.stderr
    bodies = [json.loads(line)["body"] for line in got.stdout.splitlines()]
    assert bodies == ["hello"] * 10

    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=40) == 0
    out = log.read_text()
    assert out.rstrip().endswith("local cluster stopped")
    # One line says the cluster is open (no authentication, no TLS) and how to close it.
    notice = [line for line in out.splitlines() if line.startswith("Security off:")]
    assert len(notice) == 1 and "auth_enabled and tls_enabled" in notice[0], notice
    daemon_lines = [line for line in out.splitlines() if DAEMON_LINE.match(line)]
    names = {m.group(1) for line in daemon_lines if (m := DAEMON_LINE.match(line))}
    assert names == set(PROCESSES)  # every daemon logged, each line named
    # Each line whole: the name, one timestamp at its start, no second record glued on.
    torn = [
        line
        for line in daemon_lines
        if not WHOLE_LINE.match(line) or len(TIMESTAMP.findall(line)) != 1
    ]
    assert not torn, "\n".join(torn)
    trouble = [line for line in out.splitlines() if TROUBLE.search(line)]
    assert not trouble, "\n".join(trouble)
    for i in range(3):
        # A clean stop removes the abort marker: the next start needs no recovery.
        assert not (tmp_path / "var" / f"broker-a-{i}" / "abort").exists()


def test_make_demo_fails_over_and_loses_nothing(tmp_path: Path, free_embedded_ports: None) -> None:
    config = small_segments_config(tmp_path, "broker")
    argv = [
        sys.executable, str(ROOT / "deploy" / "demo.py"),
        "--var", str(tmp_path / "demo"), "--broker-config", str(config),
    ]  # fmt: skip
    demo = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out, _ = demo.communicate(timeout=240)
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGTERM)  # the demo stops its daemons by PID, then exits
            try:
                demo.wait(timeout=40)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.wait()
    assert demo.returncode == 0, out[-4000:]
    assert "consumed 200 distinct messages of 200 acknowledged" in out
    assert "first acknowledged write after" in out
