"""``python -m storage.raftlog.repair DIR --accept-loss`` as an operator runs it (a process of its
own, docs/operations.md "A controller refuses to start: damaged Raft log"): a DIR that is not a
controller's data directory (a typo, another daemon's directory) is refused with one line and
left as it was; the runbook's repair itself is tests/raft/test_raft_storage.py's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.procs import ROOT, BrokerProc, started


def repair(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storage.raftlog.repair", str(directory), "--accept-loss"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def tree(path: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every directory (None) under ``path``."""
    return {
        str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(path.rglob("*"))
    }


def test_a_directory_that_does_not_exist_is_refused_and_not_made(tmp_path: Path) -> None:
    missing = tmp_path / "controller-n0"  # the runbook's name, where the units use n0
    done = repair(missing)
    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"repair: {missing}: no such directory; nothing was changed"
    ]
    assert not missing.exists()


def test_a_brokers_data_directory_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    with started(BrokerProc(tmp_path)) as broker:
        pass  # a real broker's store, stopped cleanly
    assert broker.data_dir.is_dir()
    before = tree(broker.data_dir)
    done = repair(broker.data_dir)
    assert done.returncode == 1, done
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"repair: {broker.data_dir} is not a controller's data directory (no hardstate, no "
        "log/); nothing was changed"
    ]
    assert tree(broker.data_dir) == before
