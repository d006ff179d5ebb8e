"""Produce phases through the SDK producer, with auto-batching on and off (issue 17, item 1).

Shared by bench/broker_bench.py (one broker) and bench/ha_bench.py (3 replicas, all-ack):
  * N sends with 64 in flight (64 tasks each awaiting ``Producer.send``): msg/s, p50/p99 of a
    send, the client's CPU per 100k, and the requests that carried them (auto-batching gathers
    sends made while others are in flight into one SEND_BATCH_MESSAGE);
  * one at a time: p50/p99 of a lone send, on and off interleaved in rounds so that both see
    the same machine load.
``profile`` runs the auto-batching 64-in-flight phase under cProfile and prints the client-side
functions that took the most time (the loop runs in this thread, so that is the client's side);
with the broker's CPU per 100k beside the client's, the line says which side bounds the rate.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import time
from dataclasses import dataclass
from typing import Any

from bench.figures import cpu_seconds, pct
from client import MessageQueue, Producer
from client.admin import Admin
from client.errors import ClientError
from protocol.codes import RequestCode
from protocol.remoting import Frame

ROUNDS = 4  # one-at-a-time rounds per mode, interleaved


@dataclass
class InFlight:
    rate: float
    p50_ms: float
    p99_ms: float
    client_cpu_per_100k: float
    messages_per_request: float
    server_cpu_per_100k: float | None = None


class _Counting(Producer):
    """A producer that counts its send requests (each attempt), single and batch."""

    requests = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        send = self._router.send  # where every send request goes, retried there

        async def counting(
            topic: str, code: int, *rest: Any, **kw: Any
        ) -> tuple[Frame, MessageQueue]:
            if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE):
                self.requests += 1
            return await send(topic, code, *rest, **kw)

        self._router.send = counting  # type: ignore[method-assign]


async def create_routed(addresses: str, *topics: str, queues: int = 8) -> None:
    """Create ``topics`` (``queues`` each) through the controllers at ``addresses``, then wait
    until a send to each succeeds."""
    async with Admin(addresses) as admin:
        for topic in topics:
            await admin.create_topic(topic, queues)
    for topic in topics:
        await wait_routed(addresses, topic)


async def wait_routed(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Until a send to ``topic`` succeeds (the controllers may not route a new topic yet)."""
    deadline = time.monotonic() + timeout
    async with Producer(bootstrap, send_deadline=2.0) as p:
        while True:
            try:
                await p.send(topic, b"routed?")
                return
            except ClientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)


async def in_flight(
    bootstrap: str,
    topic: str,
    n: int,
    body: bytes,
    *,
    auto_batch: bool,
    inflight: int = 64,
    profile: bool = False,
    server_pid: int | None = None,
) -> InFlight:
    """``n`` sends, ``inflight`` at once; ``server_pid``: the broker (master) whose CPU to
    count."""
    lat: list[float] = []
    p = _Counting(bootstrap, auto_batch=auto_batch)
    async with p:
        await p.send(topic, b"warm-up")  # route cached, connection open
        p.requests = 0
        counter = iter(range(n))

        async def worker() -> None:
            for _ in counter:
                t0 = time.perf_counter()
                await p.send(topic, body)
                lat.append(time.perf_counter() - t0)

        prof = cProfile.Profile() if profile else None
        s0 = cpu_seconds(server_pid) if server_pid else 0.0
        c0, t0 = time.process_time(), time.perf_counter()
        if prof is not None:
            prof.enable()
        await asyncio.gather(*(worker() for _ in range(inflight)))
        if prof is not None:
            prof.disable()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        server = (cpu_seconds(server_pid) - s0) / n * 100_000 if server_pid else None
        requests = p.requests
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
        text = out.getvalue()
        print("  client profile (cProfile, by own time):", flush=True)
        print("\n".join("    " + line for line in text.splitlines()[6:] if line.strip()))
    return InFlight(
        n / dt,
        pct(lat, 0.5) * 1000,
        pct(lat, 0.99) * 1000,
        cpu / n * 100_000,
        n / max(requests, 1),
        server,
    )


async def lone_sends(bootstrap: str, topic: str, body: bytes, n: int) -> list[float]:
    """Latencies (ms) of ``n`` sends one at a time, auto-batch off, after a warm-up send."""
    lone: list[float] = []
    async with Producer(bootstrap, auto_batch=False) as p:
        await p.send(topic, b"warm-up")
        for _ in range(n):
            t0 = time.perf_counter()
            await p.send(topic, body)
            lone.append((time.perf_counter() - t0) * 1000)
    return lone


async def one_at_a_time(bootstrap: str, topic: str, n: int, body: bytes) -> dict[bool, list[float]]:
    """Latencies of lone sends (ms) per mode (auto_batch True/False), interleaved rounds."""
    lat: dict[bool, list[float]] = {True: [], False: []}
    per_round = max(n // ROUNDS, 1)
    async with (
        Producer(bootstrap, auto_batch=True) as on,
        Producer(bootstrap, auto_batch=False) as off,
    ):
        await on.send(topic, b"warm-up")
        await off.send(topic, b"warm-up")
        for _ in range(ROUNDS):
            for mode, p in ((False, off), (True, on)):
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    await p.send(topic, body)
                    lat[mode].append((time.perf_counter() - t0) * 1000)
    return lat


def line_in_flight(where: str, auto_batch: bool, r: InFlight, target: float | None) -> str:
    mode = "on " if auto_batch else "off"
    text = (
        f"SDK send, 64 in flight, auto-batch {mode} {where} {r.rate:>9,.0f} msg/s"
        f"  p50 {r.p50_ms:6.2f} ms  p99 {r.p99_ms:6.2f} ms"
        f"  client CPU {r.client_cpu_per_100k:5.2f} s/100k"
        f"  {r.messages_per_request:5.1f} msg/request"
    )
    if r.server_cpu_per_100k is not None:
        text += f"  broker CPU {r.server_cpu_per_100k:5.2f} s/100k"
    if target:
        text += f"  ratio to target {r.rate / target:.2f}"
    return text


def line_one_at_a_time(where: str, lat: dict[bool, list[float]]) -> str:
    on, off = pct(lat[True], 0.5), pct(lat[False], 0.5)
    return (
        f"SDK send, one at a time {where}: p50 auto-batch on {on:.3f} ms, off {off:.3f} ms"
        f" (on/off {on / off:.2f}); p99 on {pct(lat[True], 0.99):.3f} ms,"
        f" off {pct(lat[False], 0.99):.3f} ms ({len(lat[True])} sends each)"
    )


async def both_modes(
    bootstrap: str,
    topic: str,
    body: bytes,
    *,
    messages: int,
    lone: int,
    where: tuple[str, str],
    target: float | None,
    profile: bool = False,
    server_pid: int | None = None,
) -> tuple[dict[bool, float], dict[bool, list[float]]]:
    """The SDK phases as the benches run them, each line printed as it is measured: ``messages``
    sends with 64 in flight, auto-batching on then off (``profile``: the on run under cProfile),
    their on/off ratio, then ``lone`` sends one at a time, the modes interleaved. ``where``
    names the setup in the in-flight lines and in the one-at-a-time line. Returns msg/s per
    mode and the lone sends' latencies (ms) per mode."""
    rates: dict[bool, float] = {}
    for auto in (True, False):
        r = await in_flight(
            bootstrap,
            topic,
            messages,
            body,
            auto_batch=auto,
            profile=profile and auto,
            server_pid=server_pid,
        )
        rates[auto] = r.rate
        print(line_in_flight(where[0], auto, r, target), flush=True)
    print(f"SDK send, 64 in flight, auto-batch on/off: {rates[True] / rates[False]:.2f}")
    lat = await one_at_a_time(bootstrap, topic, lone, body)
    print(line_one_at_a_time(where[1], lat), flush=True)
    return rates, lat
