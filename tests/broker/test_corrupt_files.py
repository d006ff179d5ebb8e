"""Corrupt or unusable files of a stopped broker: the broker refuses to start with exactly one
line and exit status 2 (no traceback), and starts again once the file is repaired."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.identity import FINAL_NAME
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from storage.epoch_file import FILE_NAME as EPOCH_FILE
from tests.support.cluster import BrokerNode, Cluster, controllers_started
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def refusal(daemon: BrokerProc | BrokerNode, *, since: int = 0) -> str:
    """Start ``daemon``, wait for it to exit; its exit status must be 2 and its output (from
    byte ``since`` of its log) exactly one line, which is returned."""
    daemon.start()
    assert daemon.proc is not None
    try:
        status = daemon.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.stop()
        raise AssertionError(
            f"{daemon.name} did not refuse to start:\n{daemon.log()[-3000:]}"
        ) from None
    out = daemon.log()[since:]
    lines = out.splitlines()
    assert status == 2, out
    assert len(lines) == 1, out
    assert "Traceback" not in out
    return lines[0]


def test_a_data_dir_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory's parent should be")
    proc = BrokerProc(tmp_path)
    proc.data_dir = blocker / "data"
    proc.argv[proc.argv.index("--data-dir") + 1] = str(proc.data_dir)
    line = refusal(proc)
    assert line.startswith("rmq-broker: cannot start: data directory")
    assert str(proc.data_dir) in line and "not writable" in line


async def test_corrupt_topic_config_is_one_line_exit_2(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    broker = broker_factory(tmp_path).start_and_wait()
    conn = await RemotingClient.connect(broker.address)
    try:
        resp = await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T", "queues": 1})
        assert resp.code == ResponseCode.SUCCESS
    finally:
        conn.close()
    assert broker.stop() == 0
    config = broker.data_dir / "config"
    files = [p for p in config.iterdir() if p.name.startswith("topics.json")]
    assert files
    for path in files:
        path.write_bytes(b"RMQS not a topic table")
    line = refusal(broker, since=len(broker.log()))
    assert line == (
        f"rmq-broker: cannot start: {config / 'topics.json'} and topics.json.bak are both "
        "missing or corrupt"
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with controllers_started(tmp_path) as c:
        yield c


def test_corrupt_epoch_file_and_identity_file_refuse_to_start(cluster: Cluster) -> None:
    (broker,) = cluster.add_group("g", replicas=1)
    data = broker.data_dir
    wait_until(lambda: (data / FINAL_NAME).exists(), "the broker identity file", 30)
    wait_until(lambda: (data / EPOCH_FILE).exists(), "the epoch file", 30)
    assert broker.stop() == 0
    saved = data.parent / "saved"
    saved.mkdir()
    for name in (FINAL_NAME, EPOCH_FILE):
        for path in data.glob(name + "*"):
            shutil.copy2(path, saved / path.name)

    # The epoch file and its backup both fail their checksums.
    for path in data.glob(EPOCH_FILE + "*"):
        path.write_bytes(b"RMQS garbage")
    line = refusal(broker, since=len(broker.log()))
    assert line.startswith("rmq-broker: cannot start: epoch file:")
    assert EPOCH_FILE in line
    for path in saved.glob(EPOCH_FILE + "*"):
        shutil.copy2(path, data / path.name)

    # Garbage in brokerIdentity alone: its .bak, written with it, still holds the identity.
    (data / FINAL_NAME).write_bytes(b"\x00garbage\xff" * 7)
    since = len(broker.log())
    broker.restart()
    wait_until(lambda: "becoming master" in broker.log()[since:], "the broker from its .bak", 30)
    assert broker.stop() == 0

    # Garbage in both: once the broker served and never registered, saying nothing.
    for path in data.glob(FINAL_NAME + "*"):
        path.write_bytes(b"\x00garbage\xff" * 7)
    line = refusal(broker, since=len(broker.log()))
    assert line.startswith("rmq-broker: cannot start: broker identity file unreadable:")
    assert str(data / FINAL_NAME) in line

    # Repaired, it starts and serves as the group's master again.
    for path in saved.iterdir():
        shutil.copy2(path, data / path.name)
    since = len(broker.log())
    broker.restart()
    wait_until(lambda: "becoming master" in broker.log()[since:], "the broker to be master", 30)
