"""What an idempotent send adds to the master, counted exactly rather than sampled (issue 29,
docs/idempotence-cost.md "Counted, not sampled"): ``ha_bench``'s phase 1 (single sends of
1 KiB, 64 in flight over 8 queues, one connection, 3 replicas all-ack) without and with an
idempotent producer's fields, alternated for ``--rounds`` rounds on one cluster (a new producer
id each phase, the order turned each round), with ``perf stat`` counting calls of a few
interpreter functions in the master through uprobes:

* ``PyObject_Malloc``: objects and buffers allocated (each is freed again later);
* ``PyObject_GetAttr``: attributes read by name (an interpreted object's, from compiled code
  too), rather than at a fixed place of a native class;
* ``_PyEval_EvalFrameDefault``: interpreted Python frames run;
* ``_PyType_Lookup``: look-ups of a name in a class and its bases.

Printed: each phase's calls per message, then the mean on - off. Unlike a sampled profile,
these do not move with the machine's load, so a difference of one call a message is a fact.

``--where N`` then records every allocation of ``N`` more messages in one phase of each mode,
with its call stack (``perf record --call-graph dwarf``: about 600 KB a message on disk, under
a temporary directory), and prints the callers whose allocations a message differ most.

Needs ``perf`` (linux-perf), root (uprobes are added to the interpreter's library with
``perf probe`` and removed at the end) and the compiled build (``make venv``; compiled
functions show in the stacks by name).

    python bench/idempotent_counts.py [--rounds 4] [--messages 20000] [--where 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.broker_bench import send_requests
from bench.group_of_three import group_of_three, payload
from bench.ha_bench import QUEUES, TOPIC, producer_connection
from bench.idempotent_perf import function_of, stacks
from bench.master_link import MasterLink
from protocol.codes import RequestCode
from tests.cluster.support import node_at

FUNCTIONS = (
    "PyObject_Malloc",
    "PyObject_GetAttr",
    "_PyEval_EvalFrameDefault",
    "_PyType_Lookup",
)
_CALLER_PREFIXES = ("CPyDef", "CPy_", "Py", "_Py", "__pyx")


def interpreter_library() -> Path:
    """The file holding the interpreter's functions: libpython when Python is built shared
    (the daemons load the same one), the executable itself otherwise."""
    libdir = str(sysconfig.get_config_var("LIBDIR") or "")
    name = str(sysconfig.get_config_var("INSTSONAME") or "")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and name:
        path = Path(libdir) / name
        if path.exists():
            return path
    return Path(os.path.realpath(sys.executable))


def add_probes(library: Path) -> tuple[str, list[str]]:
    """Add a uprobe on each of :data:`FUNCTIONS` in ``library`` (the ones not there yet):
    (the probes' group, the events added, for :func:`remove_probes`)."""
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    added: list[str] = []
    group = ""
    for function in FUNCTIONS:
        if f":{function} " not in listed:
            out = subprocess.run(
                ["perf", "probe", "-x", str(library), "--add", function],
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                raise SystemExit(f"perf probe {function}: {out.stderr.strip()}")
            added.append(function)
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        event = line.split()[0] if line.strip() else ""
        if event.endswith(f":{FUNCTIONS[0]}"):
            group = event.split(":")[0]
    if not group:
        raise SystemExit(f"no uprobe on {FUNCTIONS[0]} listed after adding it")
    return group, [f"{group}:{f}" for f in added]


def remove_probes(events: list[str]) -> None:
    for event in events:
        subprocess.run(["perf", "probe", "-q", "-d", event], capture_output=True)


def read_counts(path: Path, messages: int) -> dict[str, float]:
    """Calls per message of each probe, from ``perf stat -x ,``'s output file."""
    counts: dict[str, float] = {}
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and ":" in fields[2] and fields[0].isdigit():
            counts[fields[2].split(":", 1)[1]] = int(fields[0]) / messages
    return counts


def callers(data: Path) -> Counter[str]:
    """Each recorded allocation's first compiled or interpreter callers, counted."""
    found: Counter[str] = Counter()
    for _, frames in stacks(data):
        names = [function_of(f) for f in frames]
        found[" <- ".join([f for f in names if f.startswith(_CALLER_PREFIXES)][:4])] += 1
    return found


async def phase(
    link: MasterLink, messages: int, producer_id: int | None, perf: list[str] | None
) -> None:
    """One phase of single sends, with ``perf`` (a command line) running over it."""
    if perf is None:
        await _sends(link, messages, producer_id)
        return
    watcher = subprocess.Popen(perf, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.7)  # attached before the phase starts
        await _sends(link, messages, producer_id)
    finally:
        watcher.send_signal(signal.SIGINT)  # perf writes its output on SIGINT
        watcher.wait(timeout=600)


async def _sends(link: MasterLink, messages: int, producer_id: int | None) -> None:
    await send_requests(
        link.conn,
        RequestCode.SEND_MESSAGE,
        TOPIC,
        QUEUES,
        payload(1024),
        messages,
        64,
        timeout=30,
        producer_id=producer_id,
        link=link,
    )


async def run(args: argparse.Namespace, group: str, out: Path) -> None:
    ids = iter(range(1, 1_000_000))
    events = [f"{group}:{f}" for f in FUNCTIONS]
    rows: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    async with group_of_three("rmq-idempotent-counts-") as broker_a:
        pid = str(node_at(broker_a.cluster, broker_a.master).pid)
        link = await producer_connection(broker_a)
        for on in (False, True):  # warm-up: the state and the caches' first entries
            await phase(link, 5000, next(ids) if on else None, None)
        for r in range(args.rounds):
            for on in (False, True) if r % 2 == 0 else (True, False):
                stat = out / f"r{r}-{'on' if on else 'off'}.txt"
                command = ["perf", "stat", "-x", ",", "-o", str(stat), "-p", pid]
                for event in events:
                    command += ["-e", event]
                await phase(link, args.messages, next(ids) if on else None, command)
                counts = read_counts(stat, args.messages)
                rows[on].append(counts)
                print(
                    f"round {r + 1}, idempotence {'on ' if on else 'off'}: "
                    + "  ".join(f"{f} {counts.get(f, 0.0):6.1f}" for f in FUNCTIONS),
                    flush=True,
                )
        print("calls a message, the mean on - off (off's mean):")
        for f in FUNCTIONS:
            on_mean = statistics.mean(c.get(f, 0.0) for c in rows[True])
            off_mean = statistics.mean(c.get(f, 0.0) for c in rows[False])
            print(f"  {f:<26} {on_mean - off_mean:+6.2f}  ({off_mean:6.1f})", flush=True)
        if args.where:
            found: dict[bool, Counter[str]] = {}
            for on in (False, True):
                data = out / f"where-{'on' if on else 'off'}.data"
                command = [
                    *("perf", "record", "-q", "-e", f"{group}:PyObject_Malloc"),
                    *("--call-graph", "dwarf,4096", "-p", pid, "-o", str(data)),
                ]
                await phase(link, args.where, next(ids) if on else None, command)
                found[on] = callers(data)
                data.unlink()
            # perf drops events when it falls behind (more on a loaded machine), so each
            # caller's share of what was recorded is scaled by the exact count of the rounds
            per = {
                on: statistics.mean(c.get(FUNCTIONS[0], 0.0) for c in rows[on])
                / max(sum(found[on].values()), 1)
                for on in (False, True)
            }
            print(
                f"allocations a message by caller, on - off ({args.where:,} messages a mode; "
                "each caller's share of the recorded ones times the rounds' count):"
            )
            keys = sorted(
                set(found[False]) | set(found[True]),
                key=lambda k: -abs(found[True][k] * per[True] - found[False][k] * per[False]),
            )
            for k in keys[:12]:
                diff = found[True][k] * per[True] - found[False][k] * per[False]
                print(f"  {diff:+6.2f}  (off {found[False][k] * per[False]:5.2f})  {k}")
        link.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4, help="rounds of off and on (at least 1)")
    p.add_argument("--messages", type=int, default=20_000, help="single sends a phase")
    p.add_argument(
        "--where",
        type=int,
        default=0,
        help="then record the allocations of this many messages a mode with their callers (0: not)",
    )
    args = p.parse_args()
    if args.rounds < 1 or args.messages < 1 or args.where < 0:
        raise SystemExit("--rounds and --messages: at least 1; --where: at least 0")
    if shutil.which("perf") is None:
        raise SystemExit("perf not found (linux-perf): nothing counted")
    if os.geteuid() != 0:
        raise SystemExit("uprobes need root (perf probe): nothing counted")
    group, added = add_probes(interpreter_library())
    try:
        with tempfile.TemporaryDirectory(prefix="rmq-idempotent-counts-") as tmp:
            asyncio.run(run(args, group, Path(tmp)))
    finally:
        remove_probes(added)


if __name__ == "__main__":
    main()
