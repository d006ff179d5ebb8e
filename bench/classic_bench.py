"""Classic-door benchmark (issue 27): the Node.js ``ali-ons`` producer (RocketMQ's own remoting
protocol, JSON headers, through the brokers' classic door) beside our SDK over our remoting, in
one run against one group.

One broker group of 3 in controller mode (all-ack, flush async), 1 KiB messages, a topic of 8
queues. Phases, each side in turn:

* send, 64 in flight: our SDK (``Producer.send`` from 64 tasks, auto-batching off, one
  SEND_MESSAGE a message as ali-ons sends them, and on, its default); ali-ons
  (``producer.send`` from 64 concurrent loops in tests/alions/alions_bench.js, one
  SEND_MESSAGE_V2 a message; its ``nameSrv`` is a controller);
* send, one at a time: p50 of a lone send.

Printed: messages per second, the client's own CPU seconds per 100k messages (ali-ons in a node
process of its own, measured there; our SDK in this one), the master's CPU per send (and per
100k), and the ratio of the master's CPU per send through the classic door to our protocol's
(auto-batching off: the same one message a request) against the issue's target of at most 1.5.
Nothing is asserted. ``--spy DIR`` records the master with py-spy during the two
auto-batching-off / ali-ons phases and prints its top functions (bench/profile_summary.py).
ali-ons needs node and npm; it is installed from tests/alions' lockfile (``npm ci
--ignore-scripts``, once per machine; ``$NODE_PATH`` when it holds ali-ons); without node its
phases are skipped.

Measured (2026-11-29, shared 2-core machine at load average 7 to 11, ``--messages 5000`` three
runs and ``--messages 20000`` two): master CPU a send through the classic door 0.116-0.123 ms,
our protocol's (auto-batching off) 0.072-0.080 ms: 1.51-1.67 (target at most 1.5: not met by
a little); auto-batching on, 0.016-0.021 ms. 64 in flight: ali-ons 2,876-4,567 msg/s, the SDK
2,422-3,777 off and 8,653-13,046 on; ali-ons' own CPU 4.7-8.0 s/100k (node), the SDK's 3.3-3.7
off. One at a time p50: ali-ons 0.62-0.82 ms, the SDK 0.53-0.71 ms.

``--spy`` (20,000, py-spy at 200 Hz, samples per 1,000 messages): the master 61 through the
classic door, 34 through ours. The differences: the HA pump to the slaves
(``_SlaveLink._write_parts`` and ``_write``) 13 against 6, woken about once per append because
ali-ons writes each request apart and a loop turn reads fewer frames; each answer its own
``transport.write`` (``ClassicSession.send``) 7.8 against 3.1 for ``Connection._flush``, which
writes a loop turn's answers at once; the JSON header's decode and encode, the send header's
parse and the properties string about 6.5 against 1.7; and a Task per request
(``ClassicSession._await``) where our protocol answers through a ``DeferredAnswer``. The answer
writes and the send's task are gone since (one write a loop turn, a future set by the
durability wait's callback). Before and after in turn on a quiet machine (load under 2,
``--messages 10000``, three runs each): the classic door 0.109-0.110 ms a send before,
0.098-0.102 ms after, ours 0.067-0.074 ms; ratio 1.53-1.60 before, 1.32-1.48 after.

    python bench/classic_bench.py [--messages N] [--size BYTES] [--spy DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from bench.broker_bench import cpu_seconds, pct, run_async
from bench.group_of_three import group_of_three, payload
from bench.grpc_bench import Official, print_sends
from bench.ha_bench import spying
from bench.sdk_phases import InFlight, create_routed, in_flight, lone_sends
from tests.support.alions import PACKAGE
from tests.support.official_client import client_env, npm_modules

TARGET = 1.5
TOPIC = "ClassicBench"
SCRIPT = PACKAGE / "alions_bench.js"


def _load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _ratio(a: float, b: float) -> str:
    """``a / b`` to two places; "n/a" where ``b`` is 0 (a tiny run may count no CPU tick: the
    kernel counts in 10 ms)."""
    return f"{a / b:.2f}" if b else "n/a"


def _modules() -> str:
    """ali-ons' node_modules: $NODE_PATH when it holds ali-ons (tests/bench/test_benches_run.py
    installs it before and passes it, the bench's TMPDIR being the test's own), else installed
    from tests/alions' lockfile once per machine."""
    given = os.environ.get("NODE_PATH", "")
    if given and (Path(given) / "ali-ons").is_dir():
        return given
    return str(npm_modules(PACKAGE, "the ali-ons client"))


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    n = args.messages
    async with group_of_three("rmq-classic-bench-") as g:
        master = next(b for b in g.cluster.brokers if b.address == g.master)
        print(
            f"3 controllers, broker-a x3 (master {g.master}), all-ack, flush async, "
            f"{args.size} B messages, {n:,} messages a phase, 8 queues; ali-ons' nameSrv "
            f"{g.cluster.controllers[0].address}; {_load()}",
            flush=True,
        )
        await create_routed(g.addresses, TOPIC)
        spy = args.spy

        # -- our SDK over our remoting ---------------------------------------------------------
        sdk: dict[bool, InFlight] = {}
        for auto_batch in (False, True):
            with spying(spy if not auto_batch else None, "sdk", {"master": master.pid}):
                sdk[auto_batch] = await in_flight(
                    g.addresses, TOPIC, n, body, auto_batch=auto_batch, server_pid=master.pid
                )
        lone = await lone_sends(g.addresses, TOPIC, body, max(n // 20, 50))
        for auto_batch in (False, True):
            r = sdk[auto_batch]
            mode = "on, default" if auto_batch else "off"
            server = r.server_cpu_per_100k or 0.0
            print(
                f"SDK     send, 64 in flight (auto-batch {mode}): {r.rate:>8,.0f} msg/s"
                f"  p50 {r.p50_ms:6.2f} ms  client CPU {r.client_cpu_per_100k:5.1f} s/100k"
                f"  master CPU {server:5.1f} s/100k ({server / 100:.3f} ms a send)",
                flush=True,
            )
        print(
            f"SDK     send, one at a time: p50 {pct(lone, 0.5):.3f} ms ({len(lone)} sends)",
            flush=True,
        )

        # -- ali-ons through the classic door --------------------------------------------------
        node = shutil.which("node")
        if node is None or shutil.which("npm") is None:
            print("ali-ons: skipped (node and npm are needed)", flush=True)
            return
        with tempfile.TemporaryDirectory(prefix="rmq-classic-bench-home-") as home:
            env = client_env(Path(home), PATH=os.environ.get("PATH", ""), NODE_PATH=_modules())
            proc = await asyncio.create_subprocess_exec(
                node,
                str(SCRIPT),
                g.cluster.controllers[0].address,
                TOPIC,
                str(n),
                str(args.size),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=home,
            )
            alions = Official(proc)
            try:
                await alions.next()  # warmed up
                with spying(spy, "classic", {"master": master.pid}):
                    s0 = cpu_seconds(master.pid)
                    alions.go()
                    sent = await alions.next()
                    master_cpu = cpu_seconds(master.pid) - s0
                one = await alions.next()
                await asyncio.wait_for(proc.wait(), 60)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        per_send = master_cpu / n * 1000
        print_sends("ali-ons send", "(classic door):   ", sent, one, n, master_cpu)
        off = (sdk[False].server_cpu_per_100k or 0.0) / 100
        on = (sdk[True].server_cpu_per_100k or 0.0) / 100
        verdict = (
            f"target at most {TARGET}: {'met' if per_send <= TARGET * off else 'not met'}"
            if off
            else "no CPU tick of the master counted (too few messages)"
        )
        print(
            f"ratio master CPU a send, classic door / our protocol: {_ratio(per_send, off)} "
            f"(auto-batch off; {verdict}), {_ratio(per_send, on)} of auto-batch on",
            flush=True,
        )
        print(
            f"ratio ali-ons / SDK (auto-batch off) send rate, 64 in flight: "
            f"{_ratio(sent['rate'], sdk[False].rate)}; one-at-a-time p50: "
            f"{_ratio(one['p50'], pct(lone, 0.5))}; {_load()}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument(
        "--spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="py-spy record the master during the SDK's auto-batching-off phase and ali-ons' "
        "64-in-flight phase into DIR and print its top functions",
    )
    args = smoke.parse_args(parser, messages=300)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
