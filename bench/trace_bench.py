"""Send throughput with message traces on and off (issue 32, docs/traces.md).

One lone broker process (flush async), 1 KiB messages each with its own key, two ways of
sending, each run alternately with the broker's ``trace_enabled`` on and off:

* ``broker trace``: raw single sends, 64 in flight, and batches of 64 (bench/index_bench.py's
  send phase): with trace on the broker writes a Pub record per message stored;
* ``client trace``: the SDK's Producer, 64 sends in flight, ``trace=True`` against ``False``
  (the broker's own trace off): the client writes a Pub record per send.

Prints the best throughput of each side, the on/off ratio, the broker's CPU per message and the
sending process's (this one: the SDK's, whose trace writer runs there), both less disturbed by a
loaded machine than the throughput. Nothing is asserted. The figures
depend on the machine's load, which is printed with them.

Measured (--rounds 2, 2026-11-29, the shared 2-core machine at load average 22 to 34, where
the rates swing from run to run; the tree before the trace's encode-once change, e3a7384,
alternated with 99414a2): broker CPU a message on/off, single sends 1.27 to 1.35 before, 1.14
to 1.23 after; batches of 64 1.70 to 1.80 before, 1.26 to 1.50 after; the SDK's trace, sender
CPU on/off 1.99 and 2.04 before, 1.62 and 1.68 after (docs/traces.md has the table).

    python bench/trace_bench.py [--messages 20000] [--size 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from bench.broker_bench import cpu_seconds, run_async
from bench.index_bench import TOPIC, send_phase
from client import Producer
from protocol.trace import TRACE_TOPIC
from tests.support.procs import BrokerProc


async def sdk_phase(address: str, n: int, size: int, trace: bool) -> float:
    """``n`` sends of the SDK's Producer, 64 in flight; msg/s."""
    body = os.urandom(size // 2).hex().encode()[:size]
    async with Producer(address, trace=trace) as producer:
        await producer.send(TOPIC, body)  # routes and connections before the clock starts
        counter = iter(range(n))

        async def worker() -> None:
            for i in counter:
                await producer.send(TOPIC, body, keys=f"k-{i}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(64)))
        return n / (time.perf_counter() - t0)


def _broker(tmp: str, trace: bool) -> BrokerProc:
    broker = BrokerProc(
        Path(tmp),
        extra=["--flush", "async"],
        segment_bytes=1 << 30,
        extra_toml=f"trace_enabled = {'true' if trace else 'false'}\n",
    )
    broker.start_and_wait()
    return broker


Phase = Callable[[str, bool], Coroutine[Any, Any, float]]


def compare(
    name: str, args: argparse.Namespace, phase: Phase, *, client_side: bool = False
) -> None:
    """Best of ``args.rounds`` alternating runs of ``phase(address, trace)`` on and off; with
    ``client_side`` the broker's own trace stays off."""
    best = {True: 0.0, False: 0.0}
    cpu = {True: float("inf"), False: float("inf")}
    client = {True: float("inf"), False: float("inf")}
    for _ in range(args.rounds):
        for on in (True, False):
            with tempfile.TemporaryDirectory(prefix="rmq-trace-bench-") as tmp:
                broker = _broker(tmp, trace=on and not client_side)
                try:
                    if client_side:  # the operator creates the trace topic for clients
                        run_async(functools.partial(_create_topics, broker.address))
                    c0, p0 = cpu_seconds(broker.pid), time.process_time()
                    rate = run_async(functools.partial(phase, broker.address, on))
                    used = (cpu_seconds(broker.pid) - c0) / args.messages * 100_000
                    mine = (time.process_time() - p0) / args.messages * 100_000
                finally:
                    broker.stop()
            best[on] = max(best[on], rate)
            cpu[on] = min(cpu[on], used)
            client[on] = min(client[on], mine)
    print(
        f"{name:<36} trace on {best[True]:>8,.0f} msg/s ({cpu[True]:.2f} broker CPU s/100k)"
        f"   off {best[False]:>8,.0f} msg/s ({cpu[False]:.2f} s/100k)"
        f"   on/off {best[True] / best[False]:.3f}; broker CPU per message on/off "
        f"{cpu[True] / cpu[False]:.3f}; sender CPU per message on/off "
        f"{client[True] / client[False]:.3f}",
        flush=True,
    )


async def _create_topics(address: str) -> None:
    from client.admin import Admin

    async with Admin(address) as admin:
        await admin.create_topic(TRACE_TOPIC, 1)
        await admin.create_topic(TOPIC, 8)


async def _raw(address: str, trace: bool, *, n: int, size: int, batch: int) -> float:
    return await send_phase(address, n, size, 8, batch)


async def _sdk(address: str, trace: bool, *, n: int, size: int) -> float:
    return await sdk_phase(address, n, size, trace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = smoke.parse_args(parser, messages=640, rounds=1)
    load = os.getloadavg()
    print(
        f"== send throughput, trace on vs off: one lone broker process, flush async, "
        f"{args.size} B keyed messages, {args.messages:,} per run, best of {args.rounds} "
        f"alternating runs; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
        f"{os.cpu_count()} CPUs (a loaded machine: the ratios say more than the rates)",
        flush=True,
    )
    n, size = args.messages, args.size
    compare("broker trace, single sends (64 in flight)", args,
            functools.partial(_raw, n=n, size=size, batch=1))  # fmt: skip
    compare("broker trace, batches of 64", args,
            functools.partial(_raw, n=n, size=size, batch=64))  # fmt: skip
    compare("client trace, SDK sends (64 in flight)", args,
            functools.partial(_sdk, n=n, size=size), client_side=True)  # fmt: skip


if __name__ == "__main__":
    main()
