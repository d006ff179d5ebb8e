"""``rmq-pipeline`` as a real process, as a shell sees it: bad input is one line on stderr and a
non-zero status, found before Spark starts; a job's stdout is its JSON result alone (Spark's
log and progress bar are off)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from tests.pipeline.conftest import fill
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

JVM_NOTICE = "WARNING: Using incubator modules"


def job(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_bad_input_is_one_line_before_spark_starts(
    shared_broker: BrokerProc, tmp_path: Path
) -> None:
    address = shared_broker.address
    dead = f"127.0.0.1:{free_port()}"
    archive = ["--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck")]
    cases = [
        (["traffic", "-a", dead, "-t", "T"], 1, "rmq-pipeline: controllers unreachable: "),
        (
            ["archive", "-a", address, "-t", "NoSuchTopic", *archive],
            1,
            f"rmq-pipeline: topic 'NoSuchTopic' does not exist (asked {address})",
        ),
        (
            ["archive", "-a", address, "-t", "T", *archive, "--starting-offsets", "{"],
            2,
            "rmq-pipeline archive: Invalid value: --starting-offsets must be 'earliest', ",
        ),
        (["archive", "-a", address, "-t", "T"], 2, "rmq-pipeline archive: Missing option"),
        (["--conf", "x", "traffic", "-a", address, "-t", "T"], 2, "rmq-pipeline: Invalid value"),
    ]
    for args, status, start in cases:
        done = job(*args, timeout=60)
        assert (done.returncode, done.stdout) == (status, ""), (args, done.stderr)
        assert done.stderr.startswith(start) and done.stderr.count("\n") == 1, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.endswith(
            "--help)\n" if status == 2 else ""
        )
    # --verbose adds the detail before the same last line.
    verbose = job("-v", "traffic", "-a", dead, "-t", "T", timeout=60)
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
    assert verbose.stderr.splitlines()[-1].startswith("rmq-pipeline: controllers unreachable")


@pytest.mark.soak  # a JVM of its own: ~40 s on a loaded machine (the in-process variant is in
# test_pipeline_spark.py::test_jobs_archive_exactly_once_and_traffic)
def test_a_failure_inside_spark_is_one_line(shared_broker: BrokerProc, tmp_path: Path) -> None:
    fill(shared_broker.address, "JobsFail", 2, 4)
    # The offsets name a queue the topic does not have: found when the query plans its first
    # batch, inside Spark (a Python error wrapped in a Java one).
    done = job(
        "--master", "local[1]", "archive", "-a", shared_broker.address, "-t", "JobsFail",
        "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
        "--starting-offsets", '{"broker-a": {"0": 0, "1": 0, "7": 0}}',
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    lines = [ln for ln in done.stderr.splitlines() if not ln.startswith(JVM_NOTICE)]
    assert lines == [
        "rmq-pipeline: startingOffsets names broker-a/7, not a queue of topic 'JobsFail' "
        "(its queues: broker-a/0..1)"
    ], done.stderr


@pytest.mark.soak  # a JVM of its own
def test_a_jobs_stdout_is_its_json_alone(shared_broker: BrokerProc, tmp_path: Path) -> None:
    fill(shared_broker.address, "JobsQuiet", 2, 20)
    done = job(
        "--master", "local[1]", "traffic", "-a", shared_broker.address, "-t", "JobsQuiet",
        "--output", str(tmp_path / "traffic"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # No log4j lines, no progress bar: at most the JVM's own notice, printed before any
    # logging is configured.
    noise = [ln for ln in done.stderr.splitlines() if not ln.startswith(JVM_NOTICE)]
    assert noise == [], done.stderr
    plan = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert plan == json.loads((tmp_path / "traffic" / "plan.json").read_text())


def test_ctrl_c_ends_an_archive_with_interval_cleanly(
    shared_broker: BrokerProc, tmp_path: Path
) -> None:
    """``archive --interval`` runs until stopped: Ctrl-C (SIGINT) stops its query, and it prints
    its JSON result and exits 0, with nothing else on stderr. Before the fix, pyspark's own
    SIGINT handler called into the JVM from inside the call it interrupted: some fifty lines of
    py4j stacks (``reentrant call``, ``KeyboardInterrupt while sending command``), then
    ``rmq-pipeline: aborted``, exit status 1 and no result."""
    fill(shared_broker.address, "JobsStop", 2, 20)
    checkpoint = tmp_path / "ck"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "pipeline.cli", "--master", "local[1]", "archive",
            "-a", shared_broker.address, "-t", "JobsStop", "--output", str(tmp_path / "out"),
            "--checkpoint", str(checkpoint), "--interval", "1 second",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        wait_until(
            lambda: proc.poll() is not None or (checkpoint / "commits" / "0").exists(),
            "the archive's first batch committed", 180, interval=0.5,
        )  # fmt: skip
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    noise = [ln for ln in err.splitlines() if not ln.startswith(JVM_NOTICE)]
    assert noise == [], err
    result = json.loads(out)
    assert (result["topic"], result["rows"]) == ("JobsStop", 20)
    assert sum(result["endOffset"]["broker-a"].values()) == 20
