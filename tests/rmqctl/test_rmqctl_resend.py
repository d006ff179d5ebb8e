"""resendMessage (CONSUME_MESSAGE_DIRECTLY, 309) against a lone broker process
while an SDK consumer of the group runs: the message comes to the running member again (its
first topic, body, keys; stored in the group's retry topic) and rmqctl reports it consumed; the
refusals (no live member, a member not named, a FIFO group, not a message of the group, a bad
id, a group that does not exist, even with --force) are one line and exit status 1 and store
nothing; --force stores the copy for a group with no live member that is configured or was seen
on the broker. rmqctl runs in this process (tests/support/cli.py), on a thread of its own
while the consumer runs on the loop."""

from __future__ import annotations

import asyncio
import json

import msgpack
import pytest

from client.consumer import Consumer
from client.message import ReceivedMessage
from client.producer import Producer
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.support.cli import ok_json, rmqctl_run
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def rmqctl_async(*args: str) -> tuple[int, str, str]:
    """rmqctl without blocking the loop the consumer runs on."""
    done = await asyncio.to_thread(rmqctl_run, *args)
    return done.returncode, done.stdout, done.stderr


async def topics_on(address: str) -> set[str]:
    """The topics the broker at ``address`` holds a config of (GET_ALL_TOPIC_CONFIG)."""
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}, None, 5.0)
    finally:
        conn.close()
    assert resp.code == ResponseCode.SUCCESS, resp
    return set(msgpack.unpackb(resp.body or b"\x80", strict_map_key=False))


def refused(result: tuple[int, str, str], needle: str) -> None:
    code, out, err = result
    assert code == 1 and out == "", (code, out, err)
    assert err.startswith("rmqctl: ") and err.count("\n") == 1 and needle in err, err


async def test_resend_message_reaches_a_running_member_and_refusals_store_nothing(
    broker: BrokerProc,
) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    ok_json("updateTopic", "-a", a, "-t", "Other", "-q", "1")
    async with Producer(a) as producer:
        sent = [await producer.send("T", f"m-{i}".encode(), keys=f"k{i}") for i in range(5)]
        other = await producer.send("Other", b"elsewhere")

    got: list[ReceivedMessage] = []
    async with Consumer(a, "g", "T", start_from="earliest") as consumer:

        async def consume() -> None:
            while True:
                got.extend(await consumer.receive(0.2))

        task = asyncio.create_task(consume())
        try:
            await wait_until_async(lambda: len(got) >= 5, "the five messages", 30)
            assert sorted(m.body for m in got) == [f"m-{i}".encode() for i in range(5)]

            code, out, err = await rmqctl_async(
                "--json", "resendMessage", "-a", a, "-i", sent[2].msg_id, "-g", "g"
            )
            assert code == 0, err
            doc = json.loads(out)
            assert doc["msgId"] == sent[2].msg_id and doc["group"] == "g"
            assert doc["originTopic"] == "T" and doc["copy"]["topic"] == "%RETRY%g"
            assert doc["members"] == 1 and doc["consumeResult"] == "CR_RESENT"
            assert doc["consumed"] is True
            again = [m for m in got[5:] if m.body == b"m-2"]
            assert len(again) == 1 and len(got) == 6
            (copy,) = again
            assert (copy.topic, copy.stored_topic, copy.keys) == ("T", "%RETRY%g", "k2")
            assert copy.msg_id == doc["copy"]["msgId"]

            # A member not live, a message of a topic the group does not consume, a bad id.
            refused(
                await rmqctl_async("resendMessage", "-a", a, "-i", sent[0].msg_id, "-g", "g",
                                   "-c", "nobody"),
                "client nobody is not a live member of consumer group g",
            )  # fmt: skip
            refused(
                await rmqctl_async("resendMessage", "-a", a, "-i", other.msg_id, "-g", "g"),
                "subscribes to Other",
            )
            refused(
                await rmqctl_async("resendMessage", "-a", a, "-i", "zz", "-g", "g"),
                "not a message id",
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert len(got) == 6  # no refusal stored a copy the member received

    # No live member (the consumer closed): refused, unless --force, which stores the copy for
    # the group's next member: a group configured here (idle) or seen here (g, its offsets).
    ok_json("updateSubGroup", "-a", a, "-g", "idle")
    for group in ("idle", "g"):
        refused(
            await rmqctl_async("resendMessage", "-a", a, "-i", sent[1].msg_id, "-g", group),
            f"consumer group {group} has no live member on broker-a (resend with --force to ",
        )
        code, out, err = await rmqctl_async(
            "--json", "resendMessage", "-a", a, "-i", sent[1].msg_id, "-g", group, "--force",
            "--wait", "0",
        )  # fmt: skip
        assert code == 0, err
        doc = json.loads(out)
        assert doc["members"] == 0 and doc["consumed"] is None
        assert doc["copy"]["topic"] == f"%RETRY%{group}"
    # A group that does not exist (never configured, never seen here): refused, --force or
    # not, storing nothing and creating no retry topic.
    for force in ((), ("--force",)):
        refused(
            await rmqctl_async(
                "resendMessage", "-a", a, "-i", sent[1].msg_id, "-g", "nosuchgrp", "--wait",
                "2", *force,
            ),
            "consumer group nosuchgrp does not exist on broker-a",
        )  # fmt: skip
    assert "%RETRY%nosuchgrp" not in await topics_on(a)
    # A FIFO group retries in place: a copy would break its order.
    ok_json("updateSubGroup", "-a", a, "-g", "ordered", "--fifo")
    refused(
        await rmqctl_async(
            "resendMessage", "-a", a, "-i", sent[1].msg_id, "-g", "ordered", "--force"
        ),
        "does not read its retry topic (a FIFO group",
    )
