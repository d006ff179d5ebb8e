"""resetOffsetByTime and skipAccumulatedMessage while the group's members run, against real
processes: three controllers, two broker groups (one broker each), two members of the group in
this process, rmqctl as a process beside them (docs/operations.md, "Resetting offsets").

- A group that consumed 1,000 messages is reset to a time between the first 500 and the last
  500 sent: its running members receive exactly the last 500 again, each once (each member
  some: the messages are spread over every queue), and nothing of the first 500; the group's
  committed offsets are back at the queues' ends afterwards. The test prints the figures
  (pytest -s): messages consumed before, the reset time, messages received again per member,
  time from the command to the first redelivered message and to the last.
- skipAccumulatedMessage: a member holding a backlog in its buffer; after the command the
  group's lag is 0 at once (the masters' consume stats, read right after), the member drops
  the backlog and receives only what is sent afterwards.
- Refusals, one line on stderr and exit status 1, nothing changed: a time in the future, a
  group with no offset and no member. A time before the first message resets to the min and
  says so.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from client import Consumer, Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.offset_reset import OffsetResetter
from client.progress import ProgressAdmin
from client.routes import fetch_route
from remoting.client import ConnectionPool, RemotingClient
from rmqctl.common import utc_iso
from tests.cluster.support import masters_of, shared_cluster
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl_async
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "ResetTopic"
SKIP_TOPIC = "SkipTopic"
"""The skip test's own topic: the tests share the module's cluster."""
GROUP = "replay"
HALF = 500


cluster = shared_cluster(1, groups=("broker-a", "broker-b"))
"""One cluster for the module: each test has topics and groups of its own (ResetTopic and
replay, SkipTopic and skipper, StaticReset and statics) and stops no process."""


async def rmqctl(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    """rmqctl as a process, without blocking this loop (the members keep running)."""
    return await rmqctl_async("-a", cluster.controller_addresses, *args)


async def create_topic(cluster: Cluster, topic: str = TOPIC) -> None:
    async with Admin(cluster.controller_addresses) as admin:

        async def create() -> list[str] | None:
            try:
                names = await admin.create_topic(topic, 4)
            except ClientError:
                return None
            return names if len(names) == 2 else None  # not every master registered yet

        created = await wait_until_async(
            create, "the topic on both masters", 60, interval=0.2, on_timeout=cluster.logs
        )
        assert created == ["broker-a", "broker-b"]

        async def routed() -> bool:  # so producers spread the messages over both groups
            route = await admin.topic_route(topic)
            return len(route.master_addresses()) == 2 and len(route.queues) == 8

        await wait_until_async(routed, "the route to name both masters", 60, interval=0.2)


async def send(cluster: Cluster, bodies: list[str], topic: str = TOPIC) -> None:
    """One request per message, so the producer's round-robin spreads them over every queue
    (batched, most of them went to one or two queues, all owned by one member)."""
    async with Producer(
        cluster.controller_addresses, send_deadline=30.0, auto_batch=False
    ) as producer:
        await asyncio.gather(*(producer.send(topic, b.encode()) for b in bodies))


async def lag(cluster: Cluster, group: str) -> int:
    async with ProgressAdmin(cluster.controller_addresses) as progress:
        answers = await progress.consume_stats(group)
        return sum(q.lag for a in answers if a.stats for q in a.stats.groups.get(group, []))


class Member:
    """A running member that records what it receives and when."""

    def __init__(self, cluster: Cluster, group: str, name: str, topic: str = TOPIC) -> None:
        self.consumer = Consumer(
            cluster.controller_addresses, group, topic, client_id=name, commit_interval=0.2
        )
        self.got: list[tuple[float, str]] = []
        self.paused = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            if self.paused:
                await asyncio.sleep(0.05)
                continue
            for m in await self.consumer.receive(timeout=0.2):
                self.got.append((time.monotonic(), m.body.decode()))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.consumer.close()


async def test_a_running_group_reset_to_a_time_receives_exactly_the_messages_since(
    cluster: Cluster,
) -> None:
    await create_topic(cluster)
    members = [Member(cluster, GROUP, f"m{i}") for i in range(2)]
    try:
        for m in members:
            await m.start()
        await wait_until_async(
            lambda: (
                sum(len(m.consumer.owned) for m in members) == 8
                and all(m.consumer.owned for m in members)
            ),
            "the two members to share the 8 queues",
            60,
            on_timeout=cluster.logs,
        )
        first = [f"first-{i}" for i in range(HALF)]
        await send(cluster, first)
        # The reset time: after every store time of the first half (same host, same clock).
        middle = int(time.time() * 1000) + 1
        await wait_until_async(lambda: time.time() * 1000 > middle + 1, "the clock to pass it")
        last = [f"last-{i}" for i in range(HALF)]
        await send(cluster, last)

        def received() -> list[str]:
            return [body for m in members for _, body in m.got]

        await wait_until_async(
            lambda: set(received()) == {*first, *last},
            "the group to consume the 1,000 messages",
            90,
            on_timeout=cluster.logs,
        )
        await wait_until_async(
            _is_zero(cluster, GROUP), "the group's lag to be 0", 30, on_timeout=cluster.logs
        )
        seen = {m.consumer.client_id: len(m.got) for m in members}

        def again() -> list[tuple[float, str]]:
            return sorted(g for m in members for g in m.got[seen[m.consumer.client_id] :])

        started = time.monotonic()
        code, out, err = await rmqctl(
            cluster, "--json", "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(middle)
        )
        answered = time.monotonic()
        assert code == 0, err
        doc = json.loads(out)
        assert doc["group"] == GROUP and doc["topic"] == TOPIC and doc["timestamp"] == middle
        assert len(doc["queues"]) == 8 and doc["notified"] >= 2
        assert all(q["outcome"] == "reset" for q in doc["queues"]), doc
        assert sum(q["previous"] - q["offset"] for q in doc["queues"]) == HALF
        await wait_until_async(
            lambda: {b for _, b in again()} >= set(last),
            "the members to receive the last 500 again",
            60,
            on_timeout=cluster.logs,
        )
        await wait_until_async(
            _is_zero(cluster, GROUP), "the group's lag to be 0 again", 30, on_timeout=cluster.logs
        )
        redelivered = [b for _, b in again()]
        assert sorted(redelivered) == sorted(last), "exactly the messages stored since the time"
        moved = {m.consumer.client_id: len(m.got) - seen[m.consumer.client_id] for m in members}
        assert all(moved.values()), f"every member receives its queues' messages again: {moved}"
        times = [t for t, _ in again()]
        by_member = ", ".join(f"{cid} {n}" for cid, n in moved.items())
        print(
            f"\nreset figures: {sum(seen.values())} messages consumed by {len(members)} running "
            f"members; reset of {len(doc['queues'])} queues to {utc_iso(middle)} ({middle} ms), "
            f"{doc['notified']} member connections told; {len(redelivered)} messages received "
            f"again ({by_member}); the members moved: first redelivered message "
            f"{times[0] - started:.3f} s and last {times[-1] - started:.3f} s after the command "
            f"started (it answered after {answered - started:.3f} s)"
        )
    finally:
        for m in members:
            await m.close()

    # Refusals: one line, exit status 1, nothing changed.
    future = str(int(time.time() * 1000) + 3_600_000)
    code, out, err = await rmqctl(
        cluster, "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", future
    )
    assert code == 1 and "is in the future" in err and len(err.strip().splitlines()) == 1, err
    code, out, err = await rmqctl(
        cluster, "resetOffsetByTime", "-g", "nobody", "-t", TOPIC, "-s", "now"
    )
    assert code == 1 and "has no offset of ResetTopic" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert await lag(cluster, GROUP) == 0
    # A time before the first message: every queue to its min, and said so.
    code, out, err = await rmqctl(
        cluster, "resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "-1h"
    )
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith("broker-")]
    held = [r for r in rows if int(r[5]) > 0]  # an empty queue has no first message to be before
    assert held and all(r[6] == "min" and r[3] == "0" for r in held), out
    assert out.count("reset to its min offset 0") == len(held), out
    assert await lag(cluster, GROUP) == 2 * HALF


async def test_skip_makes_the_lag_0_at_once_and_the_members_drop_the_backlog(
    cluster: Cluster,
) -> None:
    await create_topic(cluster, SKIP_TOPIC)
    member = Member(cluster, "skipper", "s0", SKIP_TOPIC)
    member.paused = True  # it pulls into its buffer; the application takes nothing yet
    try:
        await member.start()
        await wait_until_async(
            lambda: len(member.consumer.owned) == 8, "the member to own the 8 queues", 60
        )
        backlog = [f"backlog-{i}" for i in range(300)]
        await send(cluster, backlog, SKIP_TOPIC)
        await wait_until_async(
            _is(cluster, "skipper", 300), "a backlog of 300", 30, on_timeout=cluster.logs
        )
        code, out, err = await rmqctl(
            cluster, "--json", "skipAccumulatedMessage", "-g", "skipper", "-t", SKIP_TOPIC
        )
        assert code == 0, err
        assert await lag(cluster, "skipper") == 0  # at once
        doc = json.loads(out)
        assert doc["timestamp"] == -1 and all(q["offset"] == q["max"] for q in doc["queues"])
        assert sum(q["offset"] - q["previous"] for q in doc["queues"]) == 300
        after = [f"after-{i}" for i in range(5)]
        await send(cluster, after, SKIP_TOPIC)
        member.paused = False
        await wait_until_async(
            lambda: len(member.got) >= 5, "the member to receive the new messages", 30
        )
        await wait_until_async(_is(cluster, "skipper", 0), "the lag to be 0", 30)
        assert sorted(b for _, b in member.got) == sorted(after), "nothing of the backlog"
    finally:
        await member.close()


def _is(cluster: Cluster, group: str, value: int) -> Any:
    async def check() -> bool:
        return await lag(cluster, group) == value

    return check


def _is_zero(cluster: Cluster, group: str) -> Any:
    async def check() -> bool:
        return await lag(cluster, group) == 0

    return check


class SlowLink(ConnectionPool):
    """A connection pool whose requests to ``slow`` start ``delay`` s late: a master that
    answers late, for the reset sent over it."""

    def __init__(self, slow: str, delay: float) -> None:
        super().__init__()
        self.slow = slow
        self.delay = delay

    async def get(self, address: str) -> RemotingClient:
        if address == self.slow:
            await asyncio.sleep(self.delay)
        return await super().get(address)


async def reset_by_time(
    cluster: Cluster, group: str, topic: str, timestamp: int, slow_master: str | None
) -> dict[str, Any]:
    """resetOffsetByTime as rmqctl (a process), or with ``slow_master`` from this process over
    a link to that group's master 1 s slow; the report as rmqctl prints it with --json."""
    if slow_master is None:
        code, out, err = await rmqctl(
            cluster, "--json", "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(timestamp)
        )
        assert code == 0, err
        doc: dict[str, Any] = json.loads(out)
        return doc
    async with Admin(cluster.controller_addresses) as admin:
        route = await admin.topic_route(topic)
    address = route.master_address(slow_master)
    assert address is not None, route
    pool = SlowLink(address, 1.0)
    boot = Bootstrap(cluster.controller_addresses, pool, 5.0)
    try:
        resetter = OffsetResetter(pool, lambda t: fetch_route(boot, t), 5.0)
        report = await resetter.by_time(group, topic, timestamp)
    finally:
        pool.close()
    return report.to_dict()


@pytest.mark.parametrize("slow_master", [None, "broker-a"], ids=["rmqctl", "a-slow-master"])
async def test_a_static_topic_resets_by_logical_offset_across_a_move(
    cluster: Cluster, slow_master: str | None
) -> None:
    """The second case resets with broker-a's master answering 1 s late: broker-b's part of
    the reset (logical queue 1's newer item) lands first. Its members took logical queue 1
    again from the offsets committed then (broker-a's not reset yet): the messages moved were
    received twice and broker-a's reset was overwritten by their commit."""
    suffix = "" if slow_master is None else "Slow"
    static = f"StaticReset{suffix}"
    group = f"statics{suffix}"
    await masters_of(cluster, "broker-a", "broker-b")
    code, _, err = await rmqctl(
        cluster, "updateStaticTopic", "-t", static, "-q", "2", "-b", "broker-a"
    )
    assert code == 0, err
    member = Member(cluster, group, "st0", static)

    def received() -> set[str]:
        return {body for _, body in member.got}

    async def sent(bodies: list[str]) -> None:
        async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
            for body in bodies:
                await producer.send(static, body.encode())

    async def logical_lag_is_0() -> bool:
        code, out, _ = await rmqctl(
            cluster, "--json", "consumerProgress", "-g", group, "-t", static
        )
        return code == 0 and json.loads(out)["totalLag"] == 0

    await member.start()
    try:
        early = [f"early-{i}" for i in range(20)]
        await sent(early)
        middle = int(time.time() * 1000) + 1
        await wait_until_async(lambda: time.time() * 1000 > middle + 1, "the clock to pass it")
        late = [f"late-{i}" for i in range(20)]
        await sent(late)
        await wait_until_async(lambda: received() >= {*early, *late}, "the first 40", 60)
        code, _, err = await rmqctl(
            cluster, "remapStaticTopic", "-t", static, "-q", "1", "-b", "broker-b"
        )
        assert code == 0, err
        moved = [f"moved-{i}" for i in range(20)]
        await sent(moved)
        since = {*late, *moved}
        await wait_until_async(lambda: received() >= {*early, *since}, "all 60", 60)
        await wait_until_async(
            logical_lag_is_0, "the group's lag to be 0", 30, on_timeout=cluster.logs
        )
        seen = len(member.got)
        doc = await reset_by_time(cluster, group, static, middle, slow_master)
        assert [q["brokerName"] for q in doc["queues"]] == ["%LOGICAL%", "%LOGICAL%"], doc
        assert sum(q["offset"] for q in doc["queues"]) == len(early)

        def again() -> list[str]:
            return [body for _, body in member.got[seen:]]

        await wait_until_async(
            lambda: set(again()) >= since, "the messages since the time again", 60
        )
        await wait_until_async(
            logical_lag_is_0, "the group's lag to be 0 again", 30, on_timeout=cluster.logs
        )
        assert sorted(again()) == sorted(since), "exactly the messages stored since the time"
    finally:
        await member.close()
