"""bench/compiled_table.py: issue 30's benchmarks, compiled and pure, beside peer and target.

Each bench's figure lines that the table reads are checked on its own tiny run
(test_benches_run.py, ``unread``); here the table's arithmetic, and one whole tiny run of the
table itself (the controller bench on both builds: about 30 s on a loaded machine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.build_compare import end_group, is_figure_line
from bench.compiled_table import table, unread
from tests.support.procs import ROOT

P6 = "throughput (256 in flight on 4 connections, fsynced): {n} entries in 1.00 s = {n} entries/s"


def test_a_row_compares_the_builds_and_meets_a_multiple_of_its_peer() -> None:
    figures = {
        ("controller", False): P6.format(n="20,000"),
        ("controller", True): P6.format(n="8,000"),
    }
    lines = table(figures, {"PySyncObj's best": 25_000.0}, smoke=False)
    assert lines[2:] == [
        "| P6 controllers, 1 KiB fsynced entries | 20,000 entries/s | 8,000 entries/s | 2.50 | "
        "PySyncObj's best: 25,000 entries/s | >= 1 x peer = 25,000 entries/s | no |"
    ]
    met = table(figures, {"PySyncObj's best": 19_000.0}, smoke=False)
    assert met[2].endswith("| yes |")


def test_a_lower_is_better_figure_and_a_failed_run() -> None:
    cold = "producer p99 with the cold reader / alone: {r} (3.10 ms against 2.50 ms; target)\n"
    figures = {("cold", False): cold.format(r="1.24"), ("cold", True): "Traceback ..."}
    lines = table(figures, {}, smoke=False)
    assert lines[2] == (
        "| cold reads: producer p99 with the reader / alone | 1.24 | failed | - | - | <= 1.50 "
        "| yes |"
    )
    assert lines[3].startswith("| cold reads: the cold reader | failed | failed | - | - | - |")


def test_unread_names_the_rows_whose_line_is_missing() -> None:
    assert unread("controller_bench.py", P6.format(n="1")) == []
    assert unread("controller_bench.py", "") == ["P6 controllers, 1 KiB fsynced entries"]
    assert unread("pipeline_bench.py", "the Spark phases are skipped: no pyspark\n") == []
    assert unread("auth_bench.py", "") == []


def test_build_compare_pairs_figures_not_daemon_log_lines() -> None:
    # a broker's log line on the bench's output was paired across builds and given a ratio
    assert not is_figure_line("2026-11-29 17:50:15 [info     ] broker stopped  broker_name=a")
    assert is_figure_line("median CPU per message (3 rounds of 20,000): off 21.6 us, on 28.7 us")


@pytest.mark.multiprocess
@pytest.mark.xdist_group("benches")
def test_the_table_runs_in_its_tiny_mode() -> None:
    argv = [sys.executable, "bench/compiled_table.py", "--smoke", "--only", "controller"]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the benches it starts are in its group
    )
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} did not finish in 240 s; output's tail:\n{end_group(proc)[-4000:]}")
    except BaseException:
        end_group(proc)
        raise
    assert proc.returncode == 0, out[-4000:]
    assert "-- compiled: controller_bench.py" in out and "-- pure: controller_bench.py" in out
    row = next(line for line in out.splitlines() if line.startswith("| P6 controllers"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1].endswith(" entries/s") and cells[2].endswith(" entries/s"), row
    assert cells[4] == "PySyncObj's best: skipped", row
