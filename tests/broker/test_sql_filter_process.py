"""SQL92 property filters against a real lone broker (issue 32 item 1): our pull and POP, the
SDK's ``Filter.sql`` (pull and POP), ``rmqctl consumeMessage --sql`` with and without ``--pop``,
a long-polling pull passing over what does not match, a bad expression refused with its position,
and a broker with ``enable_property_filter`` off refusing SQL92 on every one of those doors.

Messages carry random properties (seeded); each door must receive exactly the messages whose
properties match its expression (by an evaluator written here in plain Python), and the group's
committed offsets end at the queues' ends (lag 0) although most messages were passed over.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from client import Consumer, Filter, FilterError, Producer, SimpleConsumer
from client.admin import Admin
from client.errors import BrokerError
from client.message import ReceivedMessage
from protocol.broker_requests.pop import PopRequest
from protocol.codes import ResponseCode
from protocol.message import iter_records
from protocol.pull import (
    ConsumerOffsetQuery,
    MaxOffsetQuery,
    PullFound,
    PullNotFound,
    PullRequest,
    decode_pull_answer,
)
from protocol.remoting import Frame
from remoting.client import RemotingClient
from tests.broker.support import long_polls
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import stays_async, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Props"
QUEUES = 2
SENT = 600
ON = "enable_property_filter = true\n"

REGIONS = ["eu", "us", "ap"]


def props_of(i: int) -> dict[str, str]:
    rnd = random.Random(i)
    props = {"region": rnd.choice(REGIONS), "amount": str(rnd.randint(0, 200))}
    if rnd.random() < 0.3:
        del props["amount"]  # missing: null
    if rnd.random() < 0.5:
        props["vip"] = rnd.choice(["true", "false"])
    return props


# Expressions and the same conditions in plain Python (None: the property is missing).
EXPRESSIONS: dict[str, tuple[str, Callable[[dict[str, str]], bool]]] = {
    "eu_big": (
        "region = 'eu' AND amount > 100",
        lambda p: p["region"] == "eu" and "amount" in p and int(p["amount"]) > 100,
    ),
    "not_us_mid": (
        "region IN ('eu', 'ap') AND amount BETWEEN 50 AND 60",
        lambda p: p["region"] != "us" and "amount" in p and 50 <= int(p["amount"]) <= 60,
    ),
    "vip_or_none": (
        "vip IS TRUE OR (amount IS NULL AND region <> 'ap')",
        lambda p: p.get("vip") == "true" or ("amount" not in p and p["region"] != "ap"),
    ),
    "not_between": (
        "NOT (amount NOT BETWEEN 0 AND 5)",  # unknown when missing: NOT keeps it unknown
        lambda p: "amount" in p and 0 <= int(p["amount"]) <= 5,
    ),
}


def expected(name: str) -> list[str]:
    cond = EXPRESSIONS[name][1]
    return sorted(f"m-{i}" for i in range(SENT) if cond(props_of(i)))


async def setup(broker: BrokerProc) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, QUEUES)
    async with Producer(broker.address) as producer:
        await asyncio.gather(
            *(
                producer.send(TOPIC, f"m-{i}".encode(), tags=f"T{i % 3}", properties=props_of(i))
                for i in range(SENT)
            )
        )


async def committed_at_end(address: str, group: str) -> bool:
    return await committed_at_end_of(address, group, QUEUES)


async def raw_sql92(
    conn: RemotingClient, group: str, pull_expression: str, pop_expression: str
) -> tuple[Frame, Frame]:
    """The broker's answers to a raw pull (queue 0) and a raw POP of TOPIC by ``group`` over
    ``conn``, each with its SQL92 expression."""
    pull = PullRequest(
        group=group, topic=TOPIC, queue_id=0, offset=0, filter_type="SQL92",
        subscription=pull_expression,
    )  # fmt: skip
    pop = PopRequest(
        group=group, topic=TOPIC, max_count=4, invisible_ms=30_000,
        expression_type="SQL92", expression=pop_expression,
    )  # fmt: skip
    pull_header, _ = pull.encode()
    pop_header, _ = pop.encode()
    return (
        await conn.request(pull.code, pull_header, None, 5),
        await conn.request(pop.code, pop_header, None, 5),
    )


async def test_sql92_filters_on_pull_pop_sdk_and_rmqctl(tmp_path: Path) -> None:
    broker = BrokerProc(tmp_path, extra_toml=ON).start_and_wait()
    try:
        await setup(broker)
        addr = broker.address

        # The SDK's pull consumer: exactly the matching messages, then lag 0 while it runs.
        expr, _ = EXPRESSIONS["eu_big"]
        got: list[ReceivedMessage] = []
        async with Consumer(addr, "sdk", TOPIC, filter=Filter.sql(expr), commit_interval=0.2) as c:

            async def all_of_them() -> bool:
                got.extend(await c.receive(timeout=0.5))
                return len(got) >= len(expected("eu_big"))

            await wait_until_async(all_of_them, "the matching messages", 60)
            await stays_async(lambda: _nothing(c), 1.0, "nothing but the matching messages")
            assert sorted(m.body.decode() for m in got) == expected("eu_big")

            async def settled() -> bool:
                await _nothing(c)
                return await committed_at_end(addr, "sdk")

            await wait_until_async(settled, "sdk's committed offsets at the queues' ends", 30)

        # The SDK's POP consumer.
        expr, _ = EXPRESSIONS["not_us_mid"]
        popped: list[str] = []
        async with SimpleConsumer(addr, "pop", TOPIC, filter=Filter.sql(expr)) as sc:

            async def all_popped() -> bool:
                msgs = await sc.receive(32, invisible_duration=30, wait=0.5)
                for m in msgs:
                    await sc.ack(m)
                popped.extend(m.body.decode() for m in msgs)
                return len(popped) >= len(expected("not_us_mid"))

            await wait_until_async(all_popped, "the matching messages by POP", 60)
            assert await sc.receive(32, invisible_duration=30, wait=0.5) == []
        assert sorted(popped) == expected("not_us_mid")
        await wait_until_async(
            lambda: committed_at_end(addr, "pop"), "pop's consume offsets at the ends", 30
        )

        # rmqctl consumeMessage --sql, with and without --pop (the POP one runs for its timeout:
        # POP passes over the entries after the last match only when it reads them).
        count = str(len(expected("vip_or_none")))
        runs = (
            ("vip_or_none", ["--count", count, "--timeout", "60"]),
            ("not_between", ["--pop", "--timeout", "12"]),
        )
        for name, extra in runs:
            expr, _ = EXPRESSIONS[name]
            args = ["-a", addr, "--json", "consumeMessage", "-t", TOPIC, "-g", f"cli-{name}"]
            proc = rmqctl(*args, "--sql", expr, *extra)
            assert proc.returncode == 0, proc.stderr
            lines = [json.loads(line) for line in proc.stdout.splitlines()]
            assert sorted(d["body"] for d in lines) == expected(name), name
            await wait_until_async(
                lambda n=name: committed_at_end(addr, f"cli-{n}"),  # type: ignore[misc]
                f"cli-{name}'s offsets at the ends",
                30,
            )

        # A bad expression: refused with its position, by the SDK before any I/O, by rmqctl
        # (usage error), and by the broker (BAD_REQUEST) for a raw pull and POP.
        with pytest.raises(FilterError, match="at position 8: expected a property"):
            Consumer(addr, "bad", TOPIC, filter=Filter.sql("amount >"))
        proc = rmqctl("-a", addr, "consumeMessage", "-t", TOPIC, "-g", "bad", "--sql", "a = 'x")
        assert proc.returncode == 2, proc
        assert "at position 4: string literal is not closed" in proc.stderr
        conn = await RemotingClient.connect(addr, timeout=2.0)
        try:
            pulled, popped = await raw_sql92(conn, "raw", "region = = 'eu'", "region IN ()")
            assert pulled.code == ResponseCode.BAD_REQUEST, pulled.header
            assert "at position 9" in str(pulled.header.get("remark")), pulled.header
            assert popped.code == ResponseCode.BAD_REQUEST, popped.header
            assert "at position 11" in str(popped.header.get("remark")), popped.header
        finally:
            conn.close()
    finally:
        broker.stop()


SQL_PULL = PullRequest(
    group="G", topic=TOPIC, queue_id=0, offset=0, subscription="amount >= 10", filter_type="SQL92"
)


async def test_a_long_polling_sql_pull_passes_over_what_does_not_match(tmp_path: Path) -> None:
    port = free_port()
    extra = ["--metrics-port", str(port)]
    broker = BrokerProc(tmp_path, extra=extra, extra_toml=ON).start_and_wait()
    try:
        async with (
            long_polls(broker, port, SQL_PULL) as polls,
            Producer(broker.address) as producer,
        ):

            async def send(*amounts: int) -> None:
                for a in amounts:
                    await producer.send(TOPIC, str(a).encode(), properties={"amount": str(a)})

            await send(1, 2, 3)
            answer = decode_pull_answer(await polls.pull(0, 0))
            assert answer == PullFound(next_offset=3, count=0, body=b"")
            task = polls.pull(3, 8000)
            await polls.parked(task)
            await send(4, 5)
            await stays_async(lambda: not task.done(), 1.5, "the pull waiting past them")
            await send(10)
            answer = decode_pull_answer(await asyncio.wait_for(task, 10))
            assert isinstance(answer, PullFound) and answer.next_offset == 6
            assert [r.body for r in iter_records(answer.body)] == [b"10"]
            task = polls.pull(6, 2500)
            await polls.parked(task)
            await send(7)
            resp = await asyncio.wait_for(task, 10)
            assert decode_pull_answer(resp) == PullNotFound(next_offset=7)
    finally:
        broker.stop()


async def test_a_broker_with_property_filters_off_refuses_sql92(tmp_path: Path) -> None:
    broker = BrokerProc(tmp_path).start_and_wait()
    try:
        await setup(broker)
        addr = broker.address
        conn = await RemotingClient.connect(addr, timeout=2.0)
        try:
            pulled, popped = await raw_sql92(conn, "g", "region = 'eu'", "region = 'eu'")
            assert pulled.code == ResponseCode.SQL_FILTER_DISABLED, pulled.header
            assert "enable_property_filter" in str(pulled.header.get("remark"))
            assert popped.code == ResponseCode.SQL_FILTER_DISABLED, popped.header
            # A tag subscription is served as before.
            tags = PullRequest(group="g", topic=TOPIC, queue_id=0, offset=0, subscription="T1")
            resp = await conn.request(tags.code, tags.header(), None, 5)
            assert resp.code == ResponseCode.SUCCESS, resp.header
        finally:
            conn.close()

        # The SDK's consumer raises the refusal from receive (pulling stops: asking again is
        # refused the same way).
        async with Consumer(addr, "sdk", TOPIC, filter=Filter.sql("region = 'eu'")) as c:

            async def refused() -> bool:
                try:
                    await c.receive(timeout=0.5)
                except BrokerError as exc:
                    assert exc.code == ResponseCode.SQL_FILTER_DISABLED, exc
                    return True
                return False

            await wait_until_async(refused, "the consumer to raise SQL_FILTER_DISABLED", 30)

        for extra in ([], ["--pop"]):
            proc = rmqctl(
                "-a", addr, "consumeMessage", "-t", TOPIC, "-g", "cli", "--sql", "region = 'eu'",
                "--timeout", "30", *extra,
            )  # fmt: skip
            assert proc.returncode == 1, proc
            assert "SQL92 filters are off on this broker" in proc.stderr, proc.stderr
            assert proc.stdout == "", proc.stdout  # no table header over nothing
    finally:
        broker.stop()


async def _nothing(consumer: Consumer) -> bool:
    msgs = await consumer.receive(timeout=0.2)
    assert msgs == [], [(m.queue_id, m.queue_offset, m.properties) for m in msgs]
    return True


async def test_a_fifo_group_pops_by_sql92_in_order_and_passes_over_the_rest(
    tmp_path: Path,
) -> None:
    """A FIFO group's POP (the orderly path): only the matching messages, each message group's in
    send order, one at a time per group; the rest are passed over for good (the consume offset
    reaches the queue's end)."""
    broker = BrokerProc(tmp_path, extra_toml=ON).start_and_wait()
    try:
        addr = broker.address
        async with Admin(addr) as admin:
            await admin.create_topic(TOPIC, 1)
            await admin.update_sub_group({"groupName": "fifo", "consumeMessageOrderly": True})
        async with Producer(addr) as producer:
            for i in range(60):
                group = f"g{i % 3}"
                await producer.send(
                    TOPIC, f"{group}-{i}".encode(), properties={"n": str(i)}, message_group=group
                )
        want = {
            f"g{g}": [f"g{g}-{i}" for i in range(60) if i % 3 == g and i % 4 == 0] for g in range(3)
        }
        got: dict[str, list[str]] = {g: [] for g in want}
        sql = Filter.sql(" OR ".join(f"n = {i}" for i in range(0, 60, 4)))
        async with SimpleConsumer(addr, "fifo", TOPIC, filter=sql) as sc:

            async def all_in_order() -> bool:
                msgs = await sc.receive(32, invisible_duration=30, wait=0.5)
                groups = [m.body.decode().split("-")[0] for m in msgs]
                assert len(groups) == len(set(groups)), groups  # one per message group at a time
                for m in msgs:
                    got[m.body.decode().split("-")[0]].append(m.body.decode())
                    await sc.ack(m)
                return sum(map(len, got.values())) >= sum(map(len, want.values()))

            await wait_until_async(all_in_order, "the matching messages in order", 60)
            assert await sc.receive(32, invisible_duration=30, wait=0.5) == []
        assert got == want
        await wait_until_async(
            lambda: committed_at_end_of(addr, "fifo", 1), "fifo's consume offset at the end", 30
        )
    finally:
        broker.stop()


async def committed_at_end_of(address: str, group: str, queues: int) -> bool:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        for q in range(queues):
            mx = MaxOffsetQuery(topic=TOPIC, queue_id=q)
            end = (await conn.request(mx.code, mx.header(), None, 5)).header["offset"]
            cq = ConsumerOffsetQuery(group=group, topic=TOPIC, queue_id=q)
            resp = await conn.request(cq.code, cq.header(), None, 5)
            if resp.code != ResponseCode.SUCCESS or resp.header.get("offset") != end:
                return False
        return True
    finally:
        conn.close()
