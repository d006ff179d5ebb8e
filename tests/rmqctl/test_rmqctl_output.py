"""What rmqctl prints for a large send (a summary, a progress bar on a terminal) and for a
consume that got fewer messages than asked, against a real broker: as a subprocess where the
terminal or the pipe is the point, in this process (as test_rmqctl_lookup runs it) elsewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.rmqctl.test_rmqctl_groups import rmqctl as run
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]
RMQCTL = [sys.executable, "-m", "rmqctl"]
SUMMARY = re.compile(
    r"sent (\d+) messages in \d+\.\d\d s \(\d+ msg/s\) to (\d+) queues: broker-a 0 1 2 3\n"
)


def rmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*RMQCTL, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def rmqctl_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run rmqctl with stderr on a pseudo-terminal (as in a shell) and stdout on a pipe: the
    exit status, stdout, and what the terminal showed."""
    master, slave = os.openpty()
    shown: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the other side closed
                return
            if not chunk:
                return
            shown.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc = subprocess.Popen(
            [*RMQCTL, *args], stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, text=True
        )
        os.close(slave)
        out, _ = proc.communicate(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, out, b"".join(shown).decode(errors="replace")


def test_a_large_send_prints_a_summary_and_a_progress_bar_only_on_a_terminal(
    broker: BrokerProc,
) -> None:
    a = broker.address
    assert run("updateTopic", "-a", a, "-t", "T", "-q", "4").returncode == 0

    code, out, terminal = rmqctl_on_a_terminal(
        "sendMessage", "-a", a, "-t", "T", "-p", "x", "--count", "500"
    )
    assert code == 0
    found = SUMMARY.fullmatch(out)
    assert found and found.groups() == ("500", "4"), out  # one line, no row per message
    assert "sending" in terminal and "500/500" in terminal, terminal

    piped = rmqctl("sendMessage", "-a", a, "-t", "T", "-p", "x", "--count", "500")
    assert piped.returncode == 0 and piped.stderr == ""  # no bar off a terminal
    assert SUMMARY.fullmatch(piped.stdout)

    verbose = run("sendMessage", "-a", a, "-t", "T", "-p", "x", "--count", "20", "--verbose")
    header, *rows, summary = verbose.stdout.splitlines()
    assert header.split() == ["Msg", "Id", "Broker", "Name", "Queue", "Offset"]
    assert len(rows) == 20 and all("broker-a" in row for row in rows)
    # The summary names exactly the queues of the rows (concurrent sends are gathered into
    # batches, one queue each, so 20 sends need not use all four).
    queues = sorted({int(row.split()[2]) for row in rows})
    assert summary.startswith("sent 20 messages in ")
    noun = "queue" if len(queues) == 1 else "queues"
    assert summary.endswith(f"to {len(queues)} {noun}: broker-a {' '.join(map(str, queues))}")

    few = run("sendMessage", "-a", a, "-t", "T", "-p", "x", "--count", "3")
    assert len(few.stdout.splitlines()) == 1 + 3 + 1  # up to 10: a row each, then the summary


def test_a_consume_that_gets_fewer_than_count_says_how_many_on_stderr(broker: BrokerProc) -> None:
    a = broker.address
    assert run("updateTopic", "-a", a, "-t", "T", "-q", "2").returncode == 0
    assert run("sendMessage", "-a", a, "-t", "T", "-p", "x", "--count", "3").returncode == 0
    args = ("--json", "consumeMessage", "-a", a, "-t", "T", "-g", "G")
    short = run(*args, "--count", "5", "--timeout", "1.5")
    assert short.returncode == 0
    assert len(short.stdout.splitlines()) == 3
    assert re.fullmatch(r"3 of 5 received in \d+\.\d s\n", short.stderr), short.stderr
    # Count reached: nothing on stderr.
    assert run("sendMessage", "-a", a, "-t", "T", "-p", "y", "--count", "2").returncode == 0
    full = run(*args, "--count", "2", "--timeout", "30")
    assert (full.returncode, len(full.stdout.splitlines()), full.stderr) == (0, 2, "")
