"""NATS JetStream R3 as a peer for bench/ha_bench.py (measured only where ``nats-server`` is on PATH).

Three ``nats-server -js`` processes on loopback form a cluster in a temp dir; one file-storage
stream with ``num_replicas=3`` on one subject. Measured with the caller's payload:
  * JetStream publish with ack, one connection, 64 in flight (64 tasks each awaiting its
    ``js.publish``, the same shape as ha_bench's produce phase): msg/s, p50/p99, and the CPU of
    the stream leader's process;
  * one-at-a-time publish: p50/p99.
Batches of 64 have no JetStream equivalent and are not measured.

The Python client ``nats-py`` comes with the project's ``bench`` extra (``make bench`` installs
it); without it, or without ``nats-server``, the peer is skipped with one line. Every process
started here is ended by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.broker_bench import cpu_seconds, pct

STREAM = "HABENCH"
SUBJECT = "habench.r3"
READY_DEADLINE_S = 60.0


def nats_client_available() -> bool:
    """True if ``nats`` (nats-py, the ``bench`` extra that ``make bench`` installs) imports."""
    try:
        importlib.import_module("nats.js")
        return True
    except ImportError as e:
        print(f"NATS JetStream R3: skipped: no nats-py ({e}); `make bench` installs it", flush=True)
        return False


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process started here, then SIGKILL whichever is still alive after 5 s."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()


def start_cluster(
    tmp: Path, procs: list[subprocess.Popen[bytes]]
) -> tuple[list[str], dict[str, int]]:
    """Start three clustered JetStream servers; returns client URLs and server name -> PID."""
    ports = free_ports(6)
    client_ports, cluster_ports = ports[:3], ports[3:]
    urls, pids = [], {}
    for i in range(3):
        name = f"n{i + 1}"
        routes = ",".join(f"nats://127.0.0.1:{cluster_ports[j]}" for j in range(3) if j != i)
        store = tmp / name
        store.mkdir()
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 (owned by the child)
        try:
            p = subprocess.Popen(
                [
                    "nats-server",
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(client_ports[i]),
                    "-n",
                    name,
                    "-js",
                    "-sd",
                    str(store),
                    "--cluster_name",
                    "habench",
                    "--cluster",
                    f"nats://127.0.0.1:{cluster_ports[i]}",
                    "--routes",
                    routes,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        procs.append(p)
        urls.append(f"nats://127.0.0.1:{client_ports[i]}")
        pids[name] = p.pid
    return urls, pids


async def wait_listening(urls: list[str], procs: list[subprocess.Popen[bytes]], tmp: Path) -> None:
    """Wait until every server accepts TCP connections on its client port."""
    deadline = time.monotonic() + READY_DEADLINE_S
    for url in urls:
        port = int(url.rsplit(":", 1)[1])
        while True:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a nats-server exited while starting; logs in {tmp}")
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} not listening in {READY_DEADLINE_S:.0f} s") from None
                await asyncio.sleep(0.05)


async def create_stream(nc: Any, procs: list[subprocess.Popen[bytes]], tmp: Path) -> Any:
    """Create the R3 stream, retrying until the meta leader is elected (deadline 60 s); returns
    its stream info. ``nc``: a connected ``nats.aio.client.Client`` (nats-py, the bench extra,
    is not in every venv: typed Any)."""
    from nats.js.api import StorageType, StreamConfig

    config = StreamConfig(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE, num_replicas=3)
    jsm = nc.jsm(timeout=2.0)
    deadline = time.monotonic() + READY_DEADLINE_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"nats-server exited (code {dead[0].returncode}); logs in {tmp}")
        try:
            await jsm.add_stream(config)
            break
        except Exception as e:  # meta leader not elected yet: timeouts, 503s, no responders
            last = e
            await asyncio.sleep(0.25)
    else:
        raise RuntimeError(f"no R3 stream within {READY_DEADLINE_S:.0f} s: {last!r}")
    # The stream's own leader and both followers must be in place before timing anything.
    while time.monotonic() < deadline:
        info = await jsm.stream_info(STREAM)
        cl = info.cluster
        replicas = (cl.replicas or []) if cl else []
        if cl and cl.leader and len(replicas) == 2 and all(r.current for r in replicas):
            return info
        await asyncio.sleep(0.1)
    raise RuntimeError(f"stream {STREAM} has no leader with two current replicas")


async def measure(
    urls: list[str],
    pids: dict[str, int],
    procs: list[subprocess.Popen[bytes]],
    tmp: Path,
    body: bytes,
    messages: int,
    one_at_a_time: int,
) -> dict[str, float]:
    import nats

    await wait_listening(urls, procs, tmp)

    async def quiet(e: Exception) -> None:  # the client logs tracebacks by default
        pass

    nc = await nats.connect(servers=urls, connect_timeout=5, allow_reconnect=False, error_cb=quiet)
    try:
        js = nc.jetstream(timeout=30.0)
        info = await create_stream(nc, procs, tmp)
        leader_pid = pids[info.cluster.leader]

        sem = asyncio.Semaphore(64)
        lat: list[float] = []
        counter = iter(range(messages))

        async def worker() -> None:
            for _ in counter:
                t0 = time.perf_counter()
                async with sem:
                    await js.publish(SUBJECT, body)
                lat.append(time.perf_counter() - t0)

        cpu0, t0 = cpu_seconds(leader_pid), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(64)))
        dt = time.perf_counter() - t0
        cpu = cpu_seconds(leader_pid) - cpu0

        one: list[float] = []
        for _ in range(one_at_a_time):
            t1 = time.perf_counter()
            await js.publish(SUBJECT, body)
            one.append(time.perf_counter() - t1)

        stored = (await nc.jsm().stream_info(STREAM)).state.messages
        if stored != messages + one_at_a_time:
            raise RuntimeError(f"stream holds {stored} messages, {messages + one_at_a_time} sent")
        return {
            "rate": messages / dt,
            "mbps": messages * len(body) / dt / 1e6,
            "p50_ms": pct(lat, 0.5) * 1000,
            "p99_ms": pct(lat, 0.99) * 1000,
            "leader_cpu_s_per_100k": cpu / messages * 100_000,
            "messages": float(messages),
            "one_p50_ms": pct(one, 0.5) * 1000,
            "one_p99_ms": pct(one, 0.99) * 1000,
            "one_sends": float(one_at_a_time),
        }
    finally:
        await nc.close()


async def run_nats_r3(
    size: int, messages: int, one_at_a_time: int, body: bytes | None = None
) -> dict[str, float] | None:
    """Measure NATS JetStream R3; None (after printing why) if it cannot run here."""
    if shutil.which("nats-server") is None:
        print("NATS JetStream R3: skipped: nats-server not installed (apt-get install nats-server)")
        return None
    if not nats_client_available():
        return None
    if body is None:
        body = (b"x" * size)[:size]
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="rmq-nats-peer-") as tmp:
        try:
            urls, pids = start_cluster(Path(tmp), procs)
            return await measure(urls, pids, procs, Path(tmp), body, messages, one_at_a_time)
        except Exception as e:
            logs = ""
            for log in sorted(Path(tmp).glob("*.log")):
                lines = log.read_text(errors="replace").strip().splitlines()
                logs += f"\n  {log.name}: " + " | ".join(lines[-3:])
            print(f"NATS JetStream R3: failed: {e!r}{logs}", flush=True)
            return None
        finally:
            stop_processes(procs)


if __name__ == "__main__":
    print(asyncio.run(run_nats_r3(1024, 5000, 500)))
