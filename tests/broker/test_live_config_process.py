"""updateBrokerConfig against real broker processes: a live change is kept in the broker's data
directory (``config/liveConfig.json``), never in its config file, so it works in the documented
deployment, where the broker cannot write its config file (deploy/install.sh: root:rmq 0640 in
a root-owned directory; the unit: User=rmq, ProtectSystem=strict), and a restart keeps it. A
config file changed since wins; a damaged live file refuses the start. Before, the broker
rewrote its config file and answered CONFIG_NOT_PERSISTED (5063) "Permission denied" there.

The config file's directory is made one the broker cannot write: as root (CI; root ignores
permission bits) it is bind-mounted read-only in a mount namespace of the broker's own, as
ProtectSystem=strict does (the interpreter lives under /root here, so the broker cannot run as
another user); otherwise the file and its directory are made read-only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.live_file import LiveEntry, read_entries
from tests.support.cli import ok_json
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

READ_ONLY_MOUNT = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
"""sh: ``$1`` made read-only for this process and its children, then the rest run (exec: one PID
from unshare to the broker)."""


def read_only_argv(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``directory`` bind-mounted read-only in a mount namespace of its own."""
    return [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", READ_ONLY_MOUNT, "sh", str(directory), *argv,
    ]  # fmt: skip


def can_mount_read_only(tmp: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = tmp / "probe"
    probe.mkdir()
    done = subprocess.run(
        read_only_argv(probe, ["sh", "-c", f"! touch {probe}/x"]), capture_output=True
    )
    return done.returncode == 0 and not (probe / "x").exists()


@pytest.fixture
def deployed(tmp_path: Path) -> Iterator[tuple[BrokerProc, Path]]:
    """A broker whose config file is in a directory it cannot write (deploy/install.sh, the
    systemd unit); its data directory its own. Yields the broker (not started) and its config
    file."""
    etc = tmp_path / "etc"
    proc = BrokerProc(etc)
    config = Path(proc.argv[proc.argv.index("--config") + 1])
    with config.open("a") as fh:
        fh.write("retention_hours = 48.0  # set by config management\n")
    proc.data_dir = tmp_path / "var" / "broker-a"
    proc.argv[proc.argv.index("--data-dir") + 1] = str(proc.data_dir)
    if os.geteuid() == 0:
        if not can_mount_read_only(tmp_path):
            pytest.skip("root, and no mount namespace to make the config directory read-only")
        config.chmod(0o640)
        proc.argv = read_only_argv(etc, proc.argv)
    else:
        config.chmod(0o444)
        etc.chmod(0o555)
    try:
        yield proc, config
    finally:
        proc.stop()
        etc.chmod(0o755)


def broker_cannot_write(proc: BrokerProc, directory: Path) -> bool:
    """Whether ``directory`` is read-only to the running broker: mounted so in its namespace (as
    root), or by its mode (otherwise)."""
    if os.geteuid() != 0:
        return not os.access(directory, os.W_OK)
    for line in Path(f"/proc/{proc.pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(directory):
            return "ro" in fields[5].split(",")
    return False


def config_of(address: str) -> dict[str, Any]:
    (shown,) = ok_json("getBrokerConfig", "-b", address)["brokers"]
    assert isinstance(shown, dict)
    return shown


def test_a_live_change_works_when_the_broker_cannot_write_its_config_file(
    deployed: tuple[BrokerProc, Path],
) -> None:
    proc, config = deployed
    before = config.read_bytes()
    proc.start_and_wait()
    assert broker_cannot_write(proc, config.parent)
    live_file = proc.data_dir / "config" / "liveConfig.json"

    changed = ok_json("updateBrokerConfig", "-b", proc.address, "-k", "retention_hours", "-v", "24")
    (one,) = changed["brokers"]
    assert (one["old"], one["new"], one["startValue"], one["persisted"]) == (48.0, 24.0, 48.0, True)
    assert one["liveFile"] == one["configFile"] == str(live_file)
    assert config.read_bytes() == before  # never written
    human = rmqctl("updateBrokerConfig", "-b", proc.address, "-k", "max_pull_batch", "-v", "7")
    assert human.returncode == 0, human.stderr
    assert f"max_pull_batch 256 -> 7 (kept in {live_file}; start value 256" in human.stdout

    def shows_the_change() -> None:
        shown = config_of(proc.address)
        assert (shown["config"]["retention_hours"], shown["config"]["max_pull_batch"]) == (24.0, 7)
        assert shown["configFile"] == str(config) and shown["liveFile"] == str(live_file)
        changed_live = shown["changedLive"]
        assert sorted(changed_live) == ["max_pull_batch", "retention_hours"]
        assert changed_live["retention_hours"]["startValue"] == 48.0
        assert changed_live["retention_hours"]["setBy"].startswith("127.0.0.1:")

    shows_the_change()
    text = rmqctl("getBrokerConfig", "-b", proc.address)
    assert text.returncode == 0, text.stderr
    (line,) = [ln for ln in text.stdout.splitlines() if ln.startswith("retention_hours ")]
    assert "= 24.0  (live; changed live " in line and "start value 48.0)" in line
    assert f"live changes: {live_file}" in text.stdout

    # Killed by its PID and started again with the same command line: the change holds.
    assert proc.stop() == 0
    since = len(proc.log())
    proc.start_and_wait()
    shows_the_change()
    assert config.read_bytes() == before
    applied = [json.loads(ln) for ln in proc.log()[since:].splitlines() if ln.startswith("{")]
    events = [d["event"] for d in applied if d.get("key") == "retention_hours"]
    assert len(events) == 1 and events[0].startswith(
        "live config change of retention_hours applied: 24.0, set at "
    )
    assert events[0].endswith(f"; the config file {config} says 48.0")

    # Set back to the config file's value: the entry goes, the file still untouched.
    ok_json("updateBrokerConfig", "-b", proc.address, "-k", "retention_hours", "-v", "48")
    assert sorted(read_entries(live_file)) == ["max_pull_batch"]
    assert sorted(config_of(proc.address)["changedLive"]) == ["max_pull_batch"]
    assert config.read_bytes() == before


def test_a_value_changed_in_the_config_file_since_wins_over_the_live_change(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    proc = broker_factory(tmp_path, extra_toml="retention_hours = 48.0\n").start_and_wait()
    config = Path(proc.argv[proc.argv.index("--config") + 1])
    ok_json("updateBrokerConfig", "-b", proc.address, "-k", "retention_hours", "-v", "24")
    ok_json("updateBrokerConfig", "-b", proc.address, "-k", "max_pull_batch", "-v", "7")
    assert proc.stop() == 0
    # The operator (or config management) changes the key in the file meanwhile.
    config.write_text(
        config.read_text().replace("retention_hours = 48.0", "retention_hours = 36.0")
    )
    since = len(proc.log())
    proc.start_and_wait()

    shown = config_of(proc.address)
    assert (shown["config"]["retention_hours"], shown["config"]["max_pull_batch"]) == (36.0, 7)
    assert sorted(shown["changedLive"]) == ["max_pull_batch"]
    live_file = proc.data_dir / "config" / "liveConfig.json"
    kept = read_entries(live_file)
    assert sorted(kept) == ["max_pull_batch"] and isinstance(kept["max_pull_batch"], LiveEntry)
    logged = [json.loads(ln) for ln in proc.log()[since:].splitlines() if ln.startswith("{")]
    (warning,) = [d for d in logged if d.get("key") == "retention_hours"]
    assert warning["level"] == "warning"
    assert warning["event"] == (
        "live config change of retention_hours dropped: the config file (or a flag) changed "
        "retention_hours since, to 36.0, which wins over the live value 24.0"
    )


def test_a_damaged_live_file_refuses_the_start_with_one_line(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    proc = broker_factory(tmp_path)
    live_file = proc.data_dir / "config" / "liveConfig.json"
    live_file.parent.mkdir(parents=True)
    live_file.write_bytes(b'{"retention_hours": 24}')  # edited by hand: no checksum, no .bak
    proc.start()
    assert proc.proc is not None
    status = proc.proc.wait(timeout=30)
    out = proc.log()
    assert status == 2, out
    assert out.splitlines() == [
        f"rmq-broker: cannot start: live config changes file unreadable: {live_file} and "
        "liveConfig.json.bak are both missing or corrupt; move liveConfig.json and "
        "liveConfig.json.bak aside to start with the config file's values"
    ]

    # Moved aside, the broker starts with the config file's values.
    live_file.rename(live_file.with_name("liveConfig.json.damaged"))
    proc.start_and_wait()
    wait_until(lambda: config_of(proc.address)["changedLive"] == {}, "a start without it", 10)
