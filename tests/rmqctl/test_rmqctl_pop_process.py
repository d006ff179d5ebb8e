"""rmqctl consumeMessage --pop against a real lone broker: two runs share a group's messages,
each printed message is acked (nothing comes back), --json lines carry the attempt; --filter
takes only the listed tags; consumerProgress shows a POP group's messages in flight. rmqctl runs
in this process (as test_rmqctl_lookup runs it)."""

from __future__ import annotations

import asyncio
import json

import pytest

from client.admin import Admin
from client.producer import Producer
from client.simple_consumer import PopMessage, SimpleConsumer
from tests.rmqctl.test_rmqctl_groups import rmqctl
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess


def test_consume_message_pop_prints_and_acks(broker: BrokerProc) -> None:
    a = broker.address

    async def fill() -> set[str]:
        async with Admin(a) as admin:
            await admin.create_topic("T", 2)
        async with Producer(a) as p:
            return {
                (await p.send("T", f"m{i}".encode(), tags="AB"[i % 2])).msg_id: "AB"[i % 2]
                for i in range(30)
            }

    tags = asyncio.run(fill())
    sent = set(tags)
    base = ("--json", "consumeMessage", "-a", a, "-t", "T", "-g", "G", "--pop")
    first = rmqctl(*base, "--count", "10", "--timeout", "30", "--invisible-time", "1")
    rest = rmqctl(*base, "--count", "20", "--timeout", "30", "--invisible-time", "1")
    assert first.returncode == 0 and rest.returncode == 0, (first.stderr, rest.stderr)
    lines = [json.loads(x) for x in (first.stdout + rest.stdout).splitlines()]
    assert len(lines) == 30 and {m["msgId"] for m in lines} == sent
    assert {m["attempt"] for m in lines} == {1}
    # Everything printed was acked: nothing comes back, even past the invisible time.

    async def left() -> list[PopMessage]:
        async with SimpleConsumer(a, "G", "T") as consumer:
            return await consumer.receive(30, invisible_duration=30, wait=1.5)

    assert asyncio.run(left()) == []

    # consumerProgress shows a POP group's messages in flight per queue.
    async def hold() -> list[PopMessage]:
        async with SimpleConsumer(a, "H", "T") as consumer:
            got: list[PopMessage] = []
            while len(got) < 5:
                got += await consumer.receive(5 - len(got), invisible_duration=60, wait=1.0)
            return got

    held = asyncio.run(hold())
    progress = rmqctl("--json", "consumerProgress", "-a", a, "-g", "H")
    assert progress.returncode == 0, progress.stderr
    queues = json.loads(progress.stdout)["queues"]
    assert sum(q["popInflight"] for q in queues) == len(held) == 5
    human = rmqctl("consumerProgress", "-a", a, "-g", "H")
    assert "In Flight" in human.stdout
    bad = rmqctl("consumeMessage", "-a", a, "-t", "T", "-g", "G", "--pop", "--invisible-time", "0")
    assert bad.returncode == 2 and "invisible-time" in bad.stderr
    # --filter: a queue-bound group that asks for tag B gets exactly the B messages.
    only_b = rmqctl(
        "--json", "consumeMessage", "-a", a, "-t", "T", "-g", "Q", "--filter", "B",
        "--count", "15", "--timeout", "30",
    )  # fmt: skip
    assert only_b.returncode == 0, only_b.stderr
    got_b = {json.loads(x)["msgId"] for x in only_b.stdout.splitlines()}
    assert got_b == {mid for mid, tag in tags.items() if tag == "B"}
    bad = rmqctl("consumeMessage", "-a", a, "-t", "T", "-g", "Q", "--filter", "A ||")
    assert bad.returncode == 2 and "--filter" in bad.stderr


def test_consume_message_pop_on_a_fifo_group_prints_each_group_in_order(
    broker: BrokerProc,
) -> None:
    """A FIFO group (updateSubGroup --fifo): every message group comes out in send order, one
    message of a group per POP (the next only once the previous was acked)."""
    a = broker.address

    async def fill() -> None:
        async with Admin(a) as admin:
            await admin.create_topic("F", 2)
        async with Producer(a) as p:
            for i in range(5):
                for g in ("x", "y", "z"):
                    await p.send("F", f"{g}{i}".encode(), message_group=g)

    asyncio.run(fill())
    fifo = rmqctl("updateSubGroup", "-a", a, "-g", "FG", "--fifo")
    assert fifo.returncode == 0, fifo.stderr
    out = rmqctl(
        "--json", "consumeMessage", "-a", a, "-t", "F", "-g", "FG", "--pop",
        "--count", "15", "--timeout", "30",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert len(lines) == 15 and {m["attempt"] for m in lines} == {1}
    # The first POP could hand out only the head of each group.
    assert sorted(m["body"] for m in lines[:3]) == ["x0", "y0", "z0"]
    for g in ("x", "y", "z"):
        mine = [m for m in lines if m["messageGroup"] == g]
        assert [m["body"] for m in mine] == [f"{g}{i}" for i in range(5)]
