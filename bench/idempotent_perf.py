"""The master's CPU by part, idempotence on - off (issue 29; docs/idempotence.md "Cost",
docs/idempotence-cost.md "The rest of the master's difference"): ``ha_bench``'s phase 1
(single sends of 1 KiB, 64 in flight over 8 queues, one connection, 3 replicas all-ack) without
and with an idempotent producer's fields, alternated for ``--rounds`` rounds on one cluster (a
new producer id each phase, the order turned each round), with ``perf record --call-graph
dwarf`` on the master during each phase. Each sample is folded by where it is (a part's row
counts the samples with its function anywhere on the stack); per phase, samples / rate /
messages is µs a message. Printed: each phase's rate and master CPU, then each part's on - off
per message over the rounds' pairs (the first round left out, a warm-up), the mean ± its
standard error, and the off phases' mean. ``--role slave``: the same with the perf on a slave
and a slave's parts (the replicated append, its replay, the flush, the other threads).
``--functions N`` also prints the N functions (anywhere on the stack) whose time differs most.

Needs ``perf`` (linux-perf) and a ``kernel.perf_event_paranoid`` of 2 or less (a process's own
children). Run it on the compiled build (``make venv``): compiled functions show in the stacks
by name, interpreted ones only as the interpreter's.

    python bench/idempotent_perf.py [--rounds 17] [--messages 20000] [--freq 999] [--keep DIR]
        [--role master|slave] [--functions N]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.broker_bench import cpu_seconds, idle_cpu_seconds, send_requests
from bench.group_of_three import group_of_three, payload
from bench.ha_bench import QUEUES, TOPIC, producer_connection
from protocol.codes import RequestCode
from tests.cluster.support import node_at

HANDLER = "SendProcessor___send_message"
PARTS: tuple[tuple[str, str | None, str], ...] = (
    # (row, a function on the stack (None: every sample of the row's kind), kind)
    ("the whole master", None, "all"),
    ("the send handler (SendProcessor.send_message)", HANDLER, "all"),
    ("  the request's parse (SendRequest.parse)", "parse_SendRequest", "all"),
    ("  finding the window (SendService.usual_window)", "SendService___usual_window", "all"),
    (
        "  the window update (ProducerSequences.stored_next)",
        "ProducerSequences___stored_next",
        "all",
    ),
    ("  the __PSEQ stamp (idempotence.stamp)", "protocol___idempotence___stamp", "all"),
    ("  the record's encoding (RecordEncoder.encode_into)", "RecordEncoder___encode_into", "all"),
    ("the frame's decoding, outside the handler (msgpack unpackb)", "cmsgpack_2unpackb", "loop"),
    ("the loop thread's rest, user", None, "loop user"),
    ("the loop thread's rest, kernel", None, "loop kernel"),
    ("garbage collection", "gc_collect", "all"),
    ("the flush thread (MessageStore.flush)", "MessageStore___flush", "all"),
    ("the other threads", None, "threads"),
)
SLAVE_PARTS: tuple[tuple[str, str | None, str], ...] = (
    ("the whole slave", None, "all"),
    (
        "the replicated append (Appender.append_replicated)",
        "Appender___append_replicated",
        "all",
    ),
    ("  the replay (Replayer.scan)", "Replayer___scan", "all"),
    ("garbage collection", "gc_collect", "all"),
    ("the flush thread (MessageStore.flush)", "MessageStore___flush", "all"),
    ("the other threads", None, "threads"),
)
_OFFSET = re.compile(r"\+0x[0-9a-f]+$")


def stacks(data: Path) -> list[tuple[bool, list[str]]]:
    """Each sample of a ``perf record`` file: (taken on the process's main thread, its frames'
    function names, innermost first)."""
    out = subprocess.run(
        ["perf", "script", "--no-inline", "-i", str(data), "-F", "pid,tid,ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    samples: list[tuple[bool, list[str]]] = []
    for block in out.split("\n\n"):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if not lines or "/" not in lines[0].split()[0]:
            continue
        pid, tid = lines[0].split()[0].split("/")
        frames = [_OFFSET.sub("", [*line.split(None, 1), ""][1]) for line in lines[1:]]
        samples.append((pid == tid, frames))
    return samples


def fold(
    samples: list[tuple[bool, list[str]]], parts: tuple[tuple[str, str | None, str], ...] = PARTS
) -> Counter[str]:
    """Samples (:func:`stacks`) per row of ``parts`` (:data:`PARTS` or :data:`SLAVE_PARTS`)."""
    rows: Counter[str] = Counter()
    for main, frames in samples:
        in_handler = any(HANDLER in f for f in frames)
        in_decoding = any("cmsgpack_2unpackb" in f for f in frames)
        for row, function, kind in parts:
            if kind == "threads":
                hit = not main
            elif kind.startswith("loop"):
                hit = main and not in_handler
                if function is not None:
                    hit = hit and any(function in f for f in frames)
                else:
                    hit = hit and not in_decoding
                    kernel = bool(frames) and "[kernel" in frames[0]
                    hit = hit and (kernel if kind == "loop kernel" else not kernel)
            else:
                hit = function is None or any(function in f for f in frames)
            rows[row] += hit
    return rows


def function_of(frame: str) -> str:
    """A frame of :func:`stacks` as its function's name alone (no offset, no binary)."""
    return _OFFSET.sub("", frame.split(" (")[0])


def by_function(samples: list[tuple[bool, list[str]]]) -> Counter[str]:
    """Samples per function anywhere on their stack (each function once a sample)."""
    found: Counter[str] = Counter()
    for _, frames in samples:
        found.update({function_of(f) for f in frames if f})
    return found


async def run(
    args: argparse.Namespace, out: Path
) -> tuple[dict[str, Counter[str]], dict[str, Counter[str]]]:
    """Each phase's samples by row, and by function (empty without ``--functions``)."""
    body = payload(1024)
    ids = iter(range(1, 1_000_000))
    phases: dict[str, Counter[str]] = {}
    functions: dict[str, Counter[str]] = {}
    async with group_of_three("rmq-idempotent-perf-") as broker_a:
        pid = node_at(broker_a.cluster, broker_a.master).pid
        if args.role == "slave":
            pid = next(b.pid for b in broker_a.cluster.brokers if b.address != broker_a.master)
        parts = SLAVE_PARTS if args.role == "slave" else PARTS
        link = await producer_connection(broker_a)
        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                name = f"r{r:02d}-{'on' if on else 'off'}"
                data = out / f"{name}.data"
                idle_cpu_seconds(pid)
                perf = subprocess.Popen(
                    [
                        *("perf", "record", "-q", "-F", str(args.freq)),
                        *("--call-graph", "dwarf,32768", "-p", str(pid), "-o", str(data)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                try:
                    time.sleep(0.7)  # attached before the phase starts
                    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
                    await send_requests(
                        link.conn,
                        RequestCode.SEND_MESSAGE,
                        TOPIC,
                        QUEUES,
                        body,
                        args.messages,
                        64,
                        timeout=30,
                        producer_id=next(ids) if on else None,
                        link=link,
                    )
                    dt = time.perf_counter() - t0
                finally:
                    perf.send_signal(signal.SIGINT)  # perf writes its file on SIGINT
                    perf.wait(timeout=60)
                cpu = idle_cpu_seconds(pid)[0] - cpu0
                samples = stacks(data)
                phases[name] = fold(samples, parts)
                if args.functions:
                    functions[name] = by_function(samples)
                print(
                    f"round {r + 1}, idempotence {'on ' if on else 'off'}: "
                    f"{args.messages / dt:9,.0f} msg/s  {args.role} CPU "
                    f"{cpu / args.messages * 1e6:6.2f} "
                    f"us a message (under perf)  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
                if not args.keep:
                    data.unlink()
        link.close()
    return phases, functions


def report(
    phases: dict[str, Counter[str]],
    messages: int,
    freq: int,
    parts: tuple[tuple[str, str | None, str], ...] = PARTS,
) -> None:
    per = 1e6 / freq / messages  # µs a message that one sample stands for
    pairs = [f"r{r:02d}" for r in range(1, len(phases) // 2)]
    print(
        f"on - off, us a message, the mean +- its standard error over {len(pairs)} pairs "
        "(the first round left out); the off phases' mean:"
    )
    for row, _, _ in parts:
        diffs = [(phases[f"{p}-on"][row] - phases[f"{p}-off"][row]) * per for p in pairs]
        off = statistics.mean(phases[f"{p}-off"][row] * per for p in pairs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
        print(f"  {row:<64} {statistics.mean(diffs):+6.2f} +- {se:4.2f}  (off {off:6.2f})")


def report_functions(
    functions: dict[str, Counter[str]], messages: int, freq: int, top: int
) -> None:
    """The ``top`` functions whose samples differ most on - off (anywhere on the stack)."""
    per = 1e6 / freq / messages
    pairs = [f"r{r:02d}" for r in range(1, len(functions) // 2)]
    names = set().union(*functions.values())
    rows = []
    for name in names:
        diffs = [(functions[f"{p}-on"][name] - functions[f"{p}-off"][name]) * per for p in pairs]
        off = statistics.mean(functions[f"{p}-off"][name] * per for p in pairs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
        rows.append((statistics.mean(diffs), se, off, name))
    # the frames under every sample (the interpreter's entry, the loop's run) say nothing
    whole = max((row[2] for row in rows), default=0.0)
    rows = [row for row in rows if row[2] < whole / 2]
    rows.sort(key=lambda row: -abs(row[0]))
    print(
        f"the {top} functions whose time differs most, on - off, us a message (as above; "
        "those under half the samples or fewer):"
    )
    for mean, se, off, name in rows[:top]:
        print(f"  {mean:+6.2f} +- {se:4.2f}  (off {off:6.2f})  {name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=17, help="rounds of off and on (at least 3)")
    p.add_argument("--messages", type=int, default=20_000, help="single sends a phase")
    p.add_argument("--freq", type=int, default=999, help="perf's samples a second")
    p.add_argument("--keep", type=Path, help="keep each phase's perf.data in this directory")
    p.add_argument(
        "--role",
        choices=("master", "slave"),
        default="master",
        help="the process perf records: the master, or one of its two slaves",
    )
    p.add_argument(
        "--functions",
        type=int,
        default=0,
        metavar="N",
        help="also print the N functions whose time differs most on - off (0: not)",
    )
    args = p.parse_args()
    if args.rounds < 3:
        raise SystemExit("--rounds: at least 3 (the first is left out, and an error needs two)")
    if shutil.which("perf") is None:
        raise SystemExit("perf not found (linux-perf): nothing measured")
    with tempfile.TemporaryDirectory(prefix="rmq-idempotent-perf-data-") as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        phases, functions = asyncio.run(run(args, out))
    report(phases, args.messages, args.freq, SLAVE_PARTS if args.role == "slave" else PARTS)
    if args.functions:
        report_functions(functions, args.messages, args.freq, args.functions)


if __name__ == "__main__":
    main()
