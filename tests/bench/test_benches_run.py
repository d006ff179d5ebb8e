"""Every benchmark still runs: each ``bench/*_bench.py`` once in its tiny mode (``--smoke``,
bench/smoke.py: a few hundred messages, short phases, no peers), as ``make bench`` starts it, a
process of its own.

Checked: exit status 0, no traceback, and the figure lines it always prints (FIGURES). Timings
are never asserted; the figures of a tiny run mean nothing. A new bench is picked up by the glob
and fails here until its figure lines are in FIGURES.

Cost: the 20 benches together 2 min on the shared 2-core machine at load average 2 to 4 (3 min
20 s at 5 to 10), most of it pipeline_bench's Spark session (35 s) and ha_bench (20 s).

On failure the bench's whole process group (its daemons, the official client's process, Spark's
JVM) is ended, and the command line and the output's tail are shown.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.compiled_table import unread
from tests.support.alions import PACKAGE as ALIONS
from tests.support.official_client import npm_modules
from tests.support.procs import ROOT
from tests.support.wait import wait_until

pytestmark = pytest.mark.xdist_group("benches")
"""One worker runs the benches one after another, as before the suite ran on parallel workers:
each takes what CPU it can get and some allocate production-size (1 GiB) segments, so several at
once crowd the timing-sensitive tests and the disk (a tiny broker_bench failed 'disk full')."""

BENCH = ROOT / "bench"
BENCHES = sorted(p.name for p in BENCH.glob("*_bench.py"))

TIMEOUT = 240.0
"""Seconds a tiny run may take on a loaded 2-core machine; below pytest's own timeout (300 s), so
the group is ended here."""

SPARK_TIMEOUT = 480.0
"""The same for the bench that drives a Spark session: a JVM and about ten Spark jobs, about 40 s
alone, 170 s beside make test's other workers here, and past 240 s in a fresh-clone CI run at a
load average of 11 (its fill done, its jobs still running). Its test gets pytest's timeout
raised to match."""

LIMITS: dict[str, float] = {"pipeline_bench.py": SPARK_TIMEOUT}

NUMBER = r"[\d,]+(?:\.\d+)?"

FIGURES: dict[str, tuple[str, ...]] = {
    "auth_bench.py": (rf"^sign \+ verify \+ cached decision +{NUMBER} us/request",),
    "broker_bench.py": (
        rf"^consume \(pull, decode\) +{NUMBER} msg/s",
        rf"^SDK send, one at a time \(1 broker\): p50 auto-batch on {NUMBER} ms",
        rf"^broker memory outside the page cache \(RssAnon\) holding {NUMBER} messages: "
        rf"{NUMBER} MiB",
    ),
    "classic_bench.py": (
        rf"^SDK     send, 64 in flight \(auto-batch off\): +{NUMBER} msg/s",
        rf"^ali-ons send, 64 in flight \(classic door\): +{NUMBER} msg/s",
        rf"^ali-ons send, one at a time: p50 {NUMBER} ms",
        rf"^ratio master CPU a send, classic door / our protocol: (?:{NUMBER}|n/a) ",
    ),
    "cold_read_bench.py": (
        rf"^producer p99 with the cold reader / alone: {NUMBER} ",
        rf"^cold reader: {NUMBER} MiB/s",
    ),
    "consumer_lag_bench.py": (
        rf"^GET_CONSUME_STATS for one group \({NUMBER} bytes\): p50 {NUMBER} ms",
        rf"^scrape p50 {NUMBER} ms vs target",
    ),
    "console_bench.py": (
        rf"^/c/default/cluster: first byte {NUMBER} ms, last byte {NUMBER} ms",
        rf"^{NUMBER} clients refreshing the cluster page every 2 s: console CPU {NUMBER}% ",
    ),
    "controller_bench.py": (
        rf"^load shedding: {NUMBER} in flight",
        rf"^commit latency \(one at a time, {NUMBER} writes\): p50 +{NUMBER} ms",
        rf"^failover over {NUMBER} kills .*: p50 +{NUMBER} ms",
    ),
    "fifo_bench.py": (rf"^consume plain +{NUMBER} msg/s +FIFO group +{NUMBER} msg/s",),
    "filter_bench.py": (
        rf"^unfiltered +{NUMBER} msg/s delivered",
        rf"^SQL92 1 in 100 +{NUMBER} msg/s delivered +{NUMBER} entries/s",
        rf"^SQL92 1 in 2 +{NUMBER} msg/s delivered",
    ),
    "grpc_bench.py": (
        rf"^gRPC  send, 64 in flight \(official client\): +{NUMBER} msg/s",
        rf"^SDK   POP receive \+ ack \(4 members\): +{NUMBER} msg/s",
        rf"^gRPC  SimpleConsumer receive \+ ack \(1 member\): +{NUMBER} msg/s",
    ),
    "ha_bench.py": (
        rf"^produce, one at a time, all-ack R3 p50 {NUMBER} ms",
        rf"^  retried sends: {NUMBER} of {NUMBER}",
        rf"^SDK send, one at a time R3: p50 auto-batch on {NUMBER} ms",
        rf"^catch-up of a slave {NUMBER} MiB behind: {NUMBER} MiB/s",
        rf"^failover, kill -9 of the master .* p50 {NUMBER} s",
        rf"^failover, SIGSTOP of the master .* p50 {NUMBER} s",
        r"^NATS JetStream R3: skipped \(--no-peer\)",
    ),
    "heartbeat_bench.py": (rf"^CPU per heartbeat: median {NUMBER} us, least {NUMBER} us",),
    "idempotent_put_bench.py": (
        rf"^median CPU per message \({NUMBER} rounds of {NUMBER} in puts of {NUMBER}\): "
        rf"off {NUMBER} us, on {NUMBER} us, prop {NUMBER} us",
        rf"^on - off: [+-]{NUMBER} us a message, on/off {NUMBER}",
    ),
    "index_bench.py": (
        rf"^single sends \(64 in flight\) +index on +{NUMBER} msg/s",
        rf"^over loopback \(QUERY_MESSAGE\) +{NUMBER} random keys +p50 {NUMBER} ms",
    ),
    "pipeline_bench.py": (
        rf"^filled {NUMBER} x {NUMBER} B",
        # the spark extra is part of make test's venv; without it the Spark phases are skipped
        rf"^rmq -> rmq streaming +{NUMBER} msg/s|^the Spark phases are skipped: ",
    ),
    "pop_bench.py": (
        rf"^POP receive \+ ack \(4 SimpleConsumers\) +{NUMBER} msg/s",
        rf"^FIFO POP receive \+ ack \(4 members\) +{NUMBER} msg/s",
        rf"^transactional send \+ commit +{NUMBER} transactions/s",
    ),
    "pop_state_bench.py": (
        rf"^memory: {NUMBER} popped and acked",
        rf"^rebuild: from the snapshot: in-flight set built in {NUMBER} s",
    ),
    "remoting_server_bench.py": (
        rf"^server CPU per request \({NUMBER} connections, interval {NUMBER} s\): "
        rf"median {NUMBER} us, least {NUMBER} us",
    ),
    "queue_files_bench.py": (
        rf"^put, the last {NUMBER} queues in turn +{NUMBER} +{NUMBER} +{NUMBER}$",
        rf"^get, all {NUMBER} queues in turn +{NUMBER} +{NUMBER} +{NUMBER}$",
    ),
    "replay_bench.py": (
        rf"^  per CPU second: {NUMBER} MiB/s",
        rf"^  CPU per record: {NUMBER} us",
    ),
    "retry_bench.py": (
        rf"^process +{NUMBER} nacks in +{NUMBER} s",
        rf"^batched +{NUMBER} nacks in +{NUMBER} s",
    ),
    "scale_bench.py": (
        rf"^route lookup new p99 \(ms\) +{NUMBER} +{NUMBER}",
        rf"^route lookup x100 again p99 \(ms\) +{NUMBER} +{NUMBER}",
        rf"^  3x: route lookup: {NUMBER} topics asked new, then again \({NUMBER} asks again\), "
        rf"in {NUMBER} s; the active "
        rf"controller's loop thread ran {NUMBER}% of it and waited for a core {NUMBER}%",
        rf"^CPU per heartbeat \(us\) +(?:{NUMBER}|nan) +(?:{NUMBER}|nan)",
        rf"^startup after clean stop \(s\) +{NUMBER} +{NUMBER}",
        rf"^idle, slave CPU \(ms/s\) +{NUMBER} +{NUMBER}",
        # less the idle CPU a second times the round's length: an estimate, and in the smoke
        # run (0.5 s of idle read right after the slave caught up, rounds of a few ms) the idle
        # reading can hold settling work and come out larger than the round, so below zero
        rf"^put, slave CPU - idle \(us/msg\) +-?{NUMBER} +-?{NUMBER}",
        rf"^memory per connection \(KiB\) +{NUMBER} +{NUMBER}",
        rf"^worst growth: {NUMBER} \(.+\)$",
    ),
    "scrub_bench.py": (
        rf"^P1 medians: off {NUMBER} msg/s .*, on {NUMBER} msg/s",
        rf"^repair: a pull of a damaged record {NUMBER} ms median",
    ),
    "static_topic_bench.py": (
        rf"^remap -> first write on the new item \({NUMBER} moves under load\): p50 {NUMBER} ms",
        rf"^consume throughput, .*: ordinary {NUMBER} msg/s, static {NUMBER} msg/s",
    ),
    "store_bench.py": (rf"^replay \(read_raw \+ append_raw, 1 MiB chunks\): {NUMBER} msgs/s",),
    "tag_filter_bench.py": (rf"^ratio \(hash / records\): {NUMBER}x",),
    "timer_bench.py": (
        rf"^scheduled, delivered and consumed: +{NUMBER} msg/s",
        rf"^{NUMBER} scheduled 1 h ahead in {NUMBER} s",
    ),
    "timer_core_bench.py": (rf"^far buckets loaded from disk and drained .*: {NUMBER} entries/s",),
    "trace_bench.py": (
        rf"^broker trace, single sends \(64 in flight\) +trace on +{NUMBER} msg/s",
        rf"^client trace, SDK sends \(64 in flight\) +trace on +{NUMBER} msg/s .* on/off {NUMBER}",
    ),
    "txn_bench.py": (rf"^  commits alone: +{NUMBER} commits/s",),
}

NODE: dict[str, Path] = {"classic_bench.py": ALIONS}
"""Benches that drive a Node.js client (its package directory): without node and npm they are
skipped, under CI=true failed, as the other tests of that client are (npm_modules)."""


def group_alive(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (zombies, ended but not yet reaped by
    whoever inherited them, do not count)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(stat.parent.name))
    return alive


def end_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the bench and whatever is left of its process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_until(lambda: not group_alive(proc.pid), f"process group {proc.pid} to end", 30)


def test_every_bench_has_its_figures() -> None:
    assert BENCHES, f"no bench/*_bench.py under {BENCH}"
    assert sorted(FIGURES) == BENCHES, "FIGURES names the lines each bench always prints"


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.timeout(LIMITS[name] + 60)) if name in LIMITS else name
        for name in BENCHES
    ],
)
def test_bench_runs_in_its_tiny_mode(name: str, tmp_path: Path) -> None:
    argv = [sys.executable, str(BENCH / name), "--smoke"]
    # Its temp dirs under the test's: whatever a failed run leaves is cleaned with it.
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    if name in NODE:  # installed once per machine, not under the bench's TMPDIR
        env["NODE_PATH"] = str(npm_modules(NODE[name], f"{name}'s Node.js client"))
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the daemons it starts are in it
    )
    ran = f"{' '.join(argv)} (cwd {ROOT}, TMPDIR={tmp_path})"
    try:
        out, _ = proc.communicate(timeout=LIMITS.get(name, TIMEOUT))
    except subprocess.TimeoutExpired:
        end_group(proc)
        out, _ = proc.communicate()
        pytest.fail(
            f"{ran} did not finish in {LIMITS.get(name, TIMEOUT):g} s; output's tail:\n{out[-6000:]}"
        )
    except BaseException:
        end_group(proc)
        raise
    try:
        assert proc.returncode == 0, f"{ran} exited with status {proc.returncode}"
        assert "Traceback (most recent call last)" not in out, f"{ran} printed a traceback"
        missing = [p for p in FIGURES.get(name, ()) if not re.search(p, out, re.MULTILINE)]
        assert not missing, f"{ran} printed no line matching {missing}"
        assert name in FIGURES, f"{name}: add the figure lines it always prints to FIGURES"
        # bench/compiled_table.py (issue 30's targets, compiled and pure) reads these lines too.
        lacking = unread(name, out)
        assert not lacking, f"{ran} printed no line for bench/compiled_table.py's {lacking}"
        # It ended what it started: no daemon of it is left running.
        wait_until(lambda: not group_alive(proc.pid), f"{name}'s processes to end", 30)
    except AssertionError as exc:
        end_group(proc)
        raise AssertionError(f"{exc}\noutput's tail:\n{out[-6000:]}") from None
