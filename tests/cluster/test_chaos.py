"""Chaos: a seeded schedule of kill -9 and SIGSTOP/SIGCONT of the master, the slaves and the
controllers' Raft leader, alone and two at once, under a producer and a live consumer (DESIGN.md
section 10).

Three controllers and one group of three brokers (all-ack, async flush: kill -9 keeps the page
cache) run on loopback. After the schedule everything is healed; once the group has a master and
all three replicas in sync, a fresh consumer reads the topic and the checkers in
tests/cluster/chaos.py hold: (a) every acknowledged (queue, offset) is consumed with its body, and
so is everything the live consumer saw; (b) per queue, offsets are contiguous, a message
acknowledged before another was sent sits below it, and no slot ever held two bodies; (c) the
replicas' CommitLogs are byte-identical up to the confirm offset, which has reached the end of
every log. Sends that failed are counted per fault and printed; a lone kill or freeze of the
master, a slave or the controller leader in a healthy group must fail none (the producer's send
deadline covers a failover). (d) Every send's body is stored once: the producer is idempotent
(issue 29, docs/idempotence.md), and a retry of a send an old master stored is not stored again
by it or by its successor. The copies a run finds are printed; ``make soak`` also runs the short
seed and soak seed 100 with ``idempotent=False``, where the retries' copies are only printed,
for comparison.

``make test`` runs one short seed; ``make soak`` runs another and many seeds of 16 to 30 faults. A failure
prints its seed, the schedule and the command that replays it; CHAOS_TRACE=1 also prints each
broker's role and each controller's answer for the group as they change.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.cluster.chaos import (
    FREEZE,
    KILL,
    LEADER,
    MASTER,
    SLAVE,
    Ack,
    Fault,
    Key,
    describe,
    gaps,
    lost_or_changed,
    out_of_order,
    schedule,
    slot_conflicts,
)
from tests.cluster.support import (
    assert_replicas_identical,
    consume_all,
    create_topic,
    epoch_cache,
    full_sync_state_set,
    sync_state,
)
from tests.controller.support import agreed_leader
from tests.support.cluster import BrokerNode, Cluster, ControllerNode
from tests.support.procs import port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "ChaosTopic"
SENDERS = 6
SEND_PAUSE = 0.01  # between one sender's sends
# A frozen slave leaves the SyncStateSet after 2 s, so all-ack writes go on without it.
BROKER_CONFIG = "ha_max_time_slave_not_catchup_ms = 2000\n"


def clock() -> str:
    """Wall-clock time as the daemons' logs print it, to line events up with them."""
    return datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]


@dataclass
class History:
    """What the producer and the live consumer saw, and the faults as they were applied."""

    acked: dict[Key, Ack] = field(default_factory=dict)
    failed: list[tuple[float, str]] = field(default_factory=list)  # (issued at, error)
    live: dict[Key, bytes] = field(default_factory=dict)
    clashes: list[str] = field(default_factory=list)
    applied: list[tuple[float, Fault, list[str]]] = field(
        default_factory=list
    )  # (start, ..., whom)
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def window(self, at: float) -> int:
        """The fault whose window (its start to the next one's) holds ``at``; -1 before any."""
        starts = [start for start, _, _ in self.applied]
        return sum(1 for s in starts if s <= at) - 1


async def produce(producer: Producer, history: History, worker: int, stop: asyncio.Event) -> None:
    for n in itertools.count():
        if stop.is_set():
            return
        body = f"w{worker}-{n}".encode()
        issued, at = next(history.seq), time.monotonic()
        try:
            r = await producer.send(TOPIC, body, keys=f"w{worker}-{n}")
        except ClientError as exc:
            history.failed.append((at, f"{clock()} {body.decode()} {type(exc).__name__}: {exc}"))
        else:
            key = (r.broker_name, r.queue_id, r.queue_offset)
            if key in history.acked:
                history.clashes.append(
                    f"{key} acknowledged twice: {history.acked[key].body!r}, then {body!r}"
                )
            history.acked[key] = Ack(body, issued, next(history.seq))
        await asyncio.sleep(SEND_PAUSE)


async def consume_live(addresses: str, history: History, stop: asyncio.Event) -> None:
    async with Consumer(addresses, "chaos-live", TOPIC) as consumer:
        while not stop.is_set():
            for m in await consumer.receive(timeout=0.5):
                key = (m.broker_name, m.queue_id, m.queue_offset)
                if history.live.setdefault(key, m.body) != m.body:
                    history.clashes.append(
                        f"live consumer got {key} as {history.live[key]!r}, then {m.body!r}"
                    )


class Chaos:
    """Applies a schedule to a running cluster."""

    def __init__(self, cluster: Cluster, boot: Bootstrap, history: History) -> None:
        self.cluster = cluster
        self.boot = boot
        self.history = history

    async def settle(self, fault: Fault) -> dict[str, Any]:
        """Wait for what ``fault`` needs before it starts (a master the controllers know at its
        current address, all three replicas in sync for ``"full"``); returns the group's
        document."""
        addresses = {b.address for b in self.cluster.brokers}
        size = 3 if fault.settle == "full" else 1

        async def ready() -> dict[str, Any] | None:
            doc = await sync_state(self.boot)
            ok = (
                doc
                and doc.get("masterAddress") in addresses
                and len(doc["syncStateSet"]) >= size
                and {r["address"] for r in doc["replicas"]} == addresses
            )
            return doc if ok else None

        what = "a master with all three replicas in sync" if size == 3 else "a master"
        doc: dict[str, Any] = await wait_until_async(
            ready, what, 60, interval=0.1, on_timeout=self.cluster.logs
        )
        return doc

    async def leader(self) -> ControllerNode:
        up = [c for c in self.cluster.controllers if c.alive()]
        node_id = await agreed_leader([c.address for c in up], timeout=30)
        return next(c for c in self.cluster.controllers if c.node_id == node_id)

    async def apply(self, index: int, fault: Fault) -> None:
        doc = await self.settle(fault)
        master = next(b for b in self.cluster.brokers if b.address == doc["masterAddress"])
        slaves = [b for b in self.cluster.brokers if b is not master]
        whom: list[str] = []
        self.history.applied.append((time.monotonic(), fault, whom))
        started = time.monotonic()
        heals: dict[int, Callable[[], Awaitable[None]]] = {}
        slave_hits = 0
        events = sorted(
            [(h.start, 0, i) for i, h in enumerate(fault.hits)]
            + [(h.end, 1, i) for i, h in enumerate(fault.hits)]
        )
        for at, heal, i in events:
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            hit = fault.hits[i]
            if heal:
                await heals.pop(i)()
                continue
            node: BrokerNode | ControllerNode
            if hit.role == MASTER:
                node = master
            elif hit.role == SLAVE:
                node = slaves[(fault.slave_pick + slave_hits) % len(slaves)]
                slave_hits += 1
            else:
                assert hit.role == LEADER
                node = await self.leader()  # now: the first hit may have moved leadership
            whom.append(f"{hit.action} {hit.role} {node.name} at {time.monotonic() - started:.1f}s")
            print(f"{clock()} fault {index}: {whom[-1]} for {hit.hold}s", flush=True)
            heals[i] = await self.hit(node, hit.action, hit.moved)
        await asyncio.sleep(fault.pause)

    async def hit(
        self, node: BrokerNode | ControllerNode, action: str, moved: bool
    ) -> Callable[[], Awaitable[None]]:
        """Apply ``action`` to ``node`` now; returns what heals it."""
        if action == FREEZE:
            node.signal(signal.SIGSTOP)

            async def thaw() -> None:
                node.signal(signal.SIGCONT)

            return thaw
        assert action == KILL
        await asyncio.to_thread(node.kill9)

        async def restart() -> None:
            if isinstance(node, BrokerNode):
                await asyncio.to_thread(node.restart, new_address=moved)
            else:
                node.start()
                await asyncio.to_thread(
                    wait_until, lambda: port_open(node.port), f"{node.name} to listen again", 30
                )

        return restart


async def ask(
    address: str, code: int, header: dict[str, Any] | None = None, timeout: float = 2.0
) -> Frame | None:
    """One request to one daemon: its answer (any code), None when it does not answer."""
    try:
        conn = await RemotingClient.connect(address, timeout=timeout)
    except RemotingError:
        return None
    try:
        return await conn.request(code, header, timeout=timeout)
    except RemotingError:
        return None
    finally:
        conn.close()


async def topic_everywhere(cluster: Cluster) -> bool:
    """Every replica has the topic and every controller routes it: faults start on a topic that
    exists for good (a topic lost to a kill right after its creation is another test's case)."""
    for b in cluster.brokers:
        resp = await ask(b.address, RequestCode.GET_ALL_TOPIC_CONFIG)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return False
        if TOPIC not in msgpack.unpackb(resp.body):
            return False
    for c in cluster.controllers:
        resp = await ask(c.address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return False
    return True


async def trace_roles(cluster: Cluster, stop: asyncio.Event) -> None:
    """With CHAOS_TRACE=1: print, as they change, each broker's role, epoch and fence as it
    says them, and the group's master as each controller answers it."""
    seen: dict[str, tuple[Any, ...]] = {}
    while not stop.is_set():
        now: tuple[Any, ...]
        for b in list(cluster.brokers):
            resp = await ask(b.address, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=0.5)
            if resp is not None and resp.code == ResponseCode.SUCCESS:
                doc = msgpack.unpackb(resp.body)
                now = (doc["role"], doc["masterEpoch"], doc["fenced"])
            else:
                now = ("no answer",)
            if seen.get(b.name) != now:
                seen[b.name] = now
                print(f"{clock()} trace {b.name} {b.address}: {now}", flush=True)
        for c in cluster.controllers:
            header = {"brokerName": "broker-a"}
            resp = await ask(c.address, RequestCode.CONTROLLER_GET_REPLICA_INFO, header, 0.5)
            if resp is not None:
                h = resp.header
                now = (
                    resp.code,
                    h.get("masterBrokerId"),
                    h.get("masterAddress"),
                    h.get("masterEpoch"),
                )
            else:
                now = ("no answer",)
            if seen.get(c.name) != now:
                seen[c.name] = now
                print(f"{clock()} trace {c.name}: {now}", flush=True)
        await asyncio.sleep(0.2)


async def replicas_converged(cluster: Cluster) -> bool:
    """Every replica has the same log end and has confirmed all of it."""
    try:
        caches = [await epoch_cache(b.address) for b in cluster.brokers]
    except (OSError, RemotingError):
        return False
    ends = {int(c["maxOffset"]) for c in caches} | {int(c["confirmOffset"]) for c in caches}
    return len(ends) == 1


async def run_chaos(tmp_path: Path, seed: int, faults: int, *, idempotent: bool = True) -> None:
    plan = schedule(seed, faults)
    replay = (
        f"replay: CHAOS_SEED={seed} CHAOS_FAULTS={faults}"
        + ("" if idempotent else " CHAOS_IDEMPOTENT=0")
        + " .venv/bin/python -m pytest -m soak "
        "tests/cluster/test_chaos.py::test_chaos_replay"
    )
    print(describe(seed, plan), flush=True)
    history = History()
    cluster = Cluster(tmp_path)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    started = time.monotonic()
    try:
        cluster.start_controllers()
        cluster.add_group("broker-a", 3, config=BROKER_CONFIG)
        doc = await full_sync_state_set(boot, cluster)
        await create_topic(boot, doc["masterAddress"], TOPIC)
        await wait_until_async(
            lambda: topic_everywhere(cluster),
            "the topic everywhere",
            30,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        await check(cluster, boot, plan, history, idempotent)
    except BaseException as exc:
        applied = "\n".join(
            f"  {i:2d}. at {start - started:6.1f}s: {', '.join(whom)} ({fault})"
            for i, (start, fault, whom) in enumerate(history.applied)
        )
        raise AssertionError(
            f"{describe(seed, plan)}\napplied:\n{applied}\n{replay}\nlogs in {tmp_path}\n{exc}"
        ) from exc
    finally:
        boot.close()
        for d in [*cluster.controllers, *cluster.brokers]:
            d.signal(signal.SIGCONT)
        cluster.stop()


async def check(
    cluster: Cluster, boot: Bootstrap, plan: list[Fault], history: History, idempotent: bool
) -> None:
    stop = asyncio.Event()
    async with Producer(cluster.controller_addresses, idempotent=idempotent) as producer:
        live = asyncio.ensure_future(consume_live(cluster.controller_addresses, history, stop))
        senders = [
            asyncio.ensure_future(produce(producer, history, w, stop)) for w in range(SENDERS)
        ]
        if os.environ.get("CHAOS_TRACE"):
            senders.append(asyncio.ensure_future(trace_roles(cluster, stop)))
        try:
            chaos = Chaos(cluster, boot, history)
            for i, fault in enumerate(plan):
                await chaos.apply(i, fault)
                for task in [live, *senders]:
                    if task.done():
                        task.result()  # a crashed sender or consumer fails the run
        finally:
            stop.set()
            await asyncio.gather(*senders, live, return_exceptions=True)
        for task in [live, *senders]:
            task.result()

    # Healed: a master and all three replicas in sync, every log confirmed to its end.
    await full_sync_state_set(boot, cluster, timeout=60)
    await wait_until_async(
        lambda: replicas_converged(cluster),
        "the replicas to converge",
        60,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    expect = set(history.acked) | set(history.live)
    consumed = await consume_all(cluster.controller_addresses, TOPIC, expect, timeout=90)

    failed_per_fault: dict[int, int] = {}
    for at, _ in history.failed:
        failed_per_fault[history.window(at)] = failed_per_fault.get(history.window(at), 0) + 1
    print(
        f"acknowledged {len(history.acked)}, failed sends {len(history.failed)} "
        f"(per fault: {dict(sorted(failed_per_fault.items()))}), live consumer saw "
        f"{len(history.live)}, consumed {len(consumed)}",
        flush=True,
    )
    for _, failure in history.failed[:12]:
        print(f"failed send (answered at): {failure}", flush=True)
    copies = {body: n for body, n in Counter(consumed.values()).items() if n > 1}
    print(
        f"duplicates with idempotence {'on' if idempotent else 'off'}: "
        f"{sum(n - 1 for n in copies.values())} extra copies of {len(copies)} sends",
        flush=True,
    )
    for body, n in sorted(copies.items())[:12]:
        print(f"stored {n} times: {body!r}", flush=True)

    acked_bodies = {k: a.body for k, a in history.acked.items()}
    problems = [
        *history.clashes,
        *lost_or_changed(history.acked, consumed),
        *(
            f"the live consumer saw {k} {b!r}, the final one did not"
            for k, b in sorted(history.live.items())
            if k not in consumed
        ),
        *gaps(consumed),
        *out_of_order(history.acked),
        *slot_conflicts(acked_bodies, history.live, consumed),
        *(f"{body!r} stored {n} times" for body, n in sorted(copies.items()) if idempotent),
    ]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
    assert len(history.acked) > 100, "the producer hardly got anything acknowledged"
    # The producer's send deadline covers a failover: a lone kill or freeze of the master, a
    # slave or the controller leader in a healthy group fails no send (pairs may leave the
    # group without a master for a while).
    covered = {
        i: failed_per_fault[i]
        for i, fault in enumerate(plan)
        if fault.single_fault() and failed_per_fault.get(i)
    }
    assert not covered, f"sends failed during lone faults (fault: count): {covered}"

    confirm = await assert_replicas_identical(cluster)
    print(f"replicas byte-identical up to the confirm offset {confirm}", flush=True)


# The seed make test runs: its seven faults hit the master, a slave and the controller leader
# with both kill and freeze, alone and in pairs (checked below). Seed 21, which make test ran
# beside it until the suite neared its 15 minutes, covers the same and runs under make soak.
SHORT_SEEDS = (7,)
SHORT_FAULTS = 7


def soak_faults(seed: int) -> int:
    """The faults of soak seed ``seed``'s schedule: 16 to 30."""
    return 16 + seed % 15


@pytest.mark.parametrize("seed", [*SHORT_SEEDS, pytest.param(21, marks=pytest.mark.soak)])
async def test_chaos_short(tmp_path: Path, seed: int) -> None:
    await run_chaos(tmp_path, seed, SHORT_FAULTS)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    ("seed", "faults"), [*((s, SHORT_FAULTS) for s in SHORT_SEEDS), (100, soak_faults(100))]
)
async def test_chaos_without_idempotence(tmp_path: Path, seed: int, faults: int) -> None:
    """Runs of the seeds above with ``idempotent=False``: their duplicates are printed, not
    refused (the SDK then retries at least once, as before issue 29). The short seed's freezes
    seldom catch a send stored and replicated but not answered; soak seed 100's 26 faults
    stored 9 sends twice in a run at f4c0d6b, and none with idempotence on."""
    await run_chaos(tmp_path, seed, faults, idempotent=False)


@pytest.mark.soak
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", range(100, 124))
async def test_chaos_soak(tmp_path: Path, seed: int) -> None:
    await run_chaos(tmp_path, seed, soak_faults(seed))


@pytest.mark.soak
@pytest.mark.timeout(1800)
async def test_chaos_replay(tmp_path: Path) -> None:
    """Replays one run: ``CHAOS_SEED=N CHAOS_FAULTS=M``, as a failure prints them;
    ``CHAOS_IDEMPOTENT=0`` runs it with ``idempotent=False`` (its duplicates printed, not
    refused), to compare a seed's retries' copies without idempotence."""
    if "CHAOS_SEED" not in os.environ:
        pytest.skip("set CHAOS_SEED (and CHAOS_FAULTS) to replay a run")
    idempotent = os.environ.get("CHAOS_IDEMPOTENT", "1")
    if idempotent not in ("0", "1"):
        raise ValueError(f"CHAOS_IDEMPOTENT must be 0 or 1, not {idempotent!r}")
    await run_chaos(
        tmp_path,
        int(os.environ["CHAOS_SEED"]),
        int(os.environ.get("CHAOS_FAULTS", "20")),
        idempotent=idempotent == "1",
    )


def test_a_schedule_is_a_function_of_its_seed() -> None:
    assert schedule(7, 20) == schedule(7, 20)
    assert schedule(7, 20) != schedule(8, 20)


def test_no_fault_takes_more_than_the_design_survives() -> None:
    for seed in range(500):
        for fault in schedule(seed, 30):
            roles = [h.role for h in fault.hits]
            assert 1 <= len(roles) <= 2
            assert roles.count(LEADER) <= 1, "two controllers down loses the majority"
            assert roles.count(MASTER) <= 1
            assert len(roles) < 3, "all three brokers down"
            assert not any(h.moved and h.action != KILL for h in fault.hits)
            assert all(h.start >= 0 and h.hold > 0 for h in fault.hits)


def test_the_short_seeds_cover_every_role_and_action() -> None:
    faults = [f for seed in SHORT_SEEDS for f in schedule(seed, SHORT_FAULTS)]
    hits = {(h.role, h.action) for f in faults for h in f.hits}
    assert hits == {(r, a) for r in (MASTER, SLAVE, LEADER) for a in (KILL, FREEZE)}
    assert any(len(f.hits) == 2 for f in faults)
    assert any(f.single_fault() and f.hits[0].role == MASTER for f in faults)


def test_the_checkers_catch_what_they_are_for() -> None:
    acked = {("b", 0, 0): Ack(b"x", 0, 1), ("b", 0, 1): Ack(b"y", 2, 3)}
    assert not lost_or_changed(acked, {("b", 0, 0): b"x", ("b", 0, 1): b"y"})
    assert lost_or_changed(acked, {("b", 0, 0): b"x"})
    assert lost_or_changed(acked, {("b", 0, 0): b"x", ("b", 0, 1): b"z"})
    assert not gaps([("b", 0, 0), ("b", 0, 1), ("b", 1, 0)])
    assert gaps([("b", 0, 0), ("b", 0, 2)])
    assert gaps([("b", 0, 1)])
    assert not out_of_order(acked)
    # "y" was acknowledged (at 3) before "x" was sent (at 4), yet "x" got the lower offset.
    swapped = {("b", 0, 0): Ack(b"x", 4, 5), ("b", 0, 1): Ack(b"y", 2, 3)}
    assert out_of_order(swapped)
    # In flight together: either order is fine.
    assert not out_of_order({("b", 0, 0): Ack(b"x", 2, 5), ("b", 0, 1): Ack(b"y", 1, 3)})
    assert slot_conflicts({("b", 0, 0): b"x"}, {("b", 0, 0): b"z"})
    assert not slot_conflicts({("b", 0, 0): b"x"}, {("b", 0, 0): b"x", ("b", 0, 1): b"q"})
