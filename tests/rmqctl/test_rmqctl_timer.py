"""Scheduled messages through the SDK and rmqctl against a real lone broker: send with a delay
or a time, recall before delivery, and the refusals (malformed id, not a scheduled message,
already recalled), each one line and exit status 1 with the broker still serving. rmqctl runs in
this process (as test_rmqctl_lookup runs it), but where a test needs its own environment (TZ) or
runs on an event loop."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from client.consumer import Consumer
from client.errors import BrokerError, ClientError
from client.message import Message
from client.producer import Producer
from protocol.codes import ResponseCode
from tests.rmqctl import test_rmqctl_broker_process as process
from tests.rmqctl.test_rmqctl_groups import ok_json, rmqctl
from tests.support.procs import BrokerProc
from tests.support.procs import rmqctl as rmqctl_process
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


def test_rmqctl_schedules_recalls_and_refuses_bad_recalls(broker: BrokerProc) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    ok_json("updateTopic", "-a", a, "-t", "Other", "-q", "1")
    before = int(time.time() * 1000)
    sent = ok_json("sendMessage", "-a", a, "-t", "T", "-p", "later", "--delay", "30s")
    after = int(time.time() * 1000) + 1
    assert isinstance(sent, dict)
    (result,) = sent["results"]
    # 30 s from when the command ran, however long it took (the same host's clock).
    assert result["queueOffset"] == -1
    assert before + 30_000 <= result["deliverAtMs"] <= after + 30_000, (before, result, after)
    at = datetime.now(UTC) + timedelta(minutes=5)
    sent_at = ok_json("sendMessage", "-a", a, "-t", "T", "-p", "x", "--deliver-at", at.isoformat())
    assert isinstance(sent_at, dict)
    assert abs(sent_at["results"][0]["deliverAtMs"] - at.timestamp() * 1000) < 2
    # A time without an offset is UTC, as every time rmqctl prints (it was the local time, and
    # the Deliver At column too, while queryMsgByKey read such times as UTC).
    naive = (at.replace(microsecond=0, tzinfo=None) + timedelta(minutes=1)).isoformat()
    tokyo = {**os.environ, "TZ": "Asia/Tokyo"}
    human = rmqctl_process(
        "sendMessage", "-a", a, "-t", "T", "-p", "x", "--deliver-at", naive, env=tokyo
    )
    assert human.returncode == 0 and f"scheduled  {naive}.000+00:00" in human.stdout, human.stdout
    assert "past" not in human.stdout
    plain = ok_json("sendMessage", "-a", a, "-t", "T", "-p", "now")
    assert isinstance(plain, dict) and plain["results"][0]["queueOffset"] == 0
    past = rmqctl("sendMessage", "-a", a, "-t", "T", "-p", "x", "--deliver-at", "2020-01-01")
    assert past.returncode == 0, past.stderr
    assert "2020-01-01T00:00:00.000+00:00 (past: delivered at once)" in past.stdout, past.stdout

    msg_id = result["msgId"]
    assert ok_json("recallMessage", "-a", a, "-t", "T", "-i", msg_id) == {
        "recalled": msg_id,
        "topic": "T",
    }
    for args, words in [
        (["-t", "T", "-i", msg_id], "already delivered or recalled"),
        (["-t", "T", "-i", plain["results"][0]["msgId"]], "not a scheduled message"),
        (["-t", "Other", "-i", sent_at["results"][0]["msgId"]], "not a scheduled message"),
        (["-t", "T", "-i", "not-an-id"], "not a message id: 'not-an-id' (32 hex digits"),
    ]:
        proc = rmqctl("recallMessage", "-a", a, *args)
        assert proc.returncode == 1, proc
        assert proc.stderr.startswith("rmqctl: ") and words in proc.stderr, proc.stderr
    bad = rmqctl("sendMessage", "-a", a, "-t", "T", "-p", "x", "--delay", "-5s")
    assert bad.returncode == 1 and "negative" in bad.stderr, bad.stderr
    bad = rmqctl("sendMessage", "-a", a, "-t", "T", "-p", "x", "--delay", "41d")
    assert bad.returncode == 1 and "maximum delay" in bad.stderr, bad.stderr
    bad = rmqctl("sendMessage", "-a", a, "-t", "T", "-p", "x", "--delay", "soon")
    assert bad.returncode == 2 and "not a delay" in bad.stderr
    ok_json("sendMessage", "-a", a, "-t", "T", "-p", "still serving")


async def test_sdk_recall_cancels_delivery_and_batches_mix_scheduled_items(
    broker: BrokerProc,
) -> None:
    a = broker.address
    process.ok_json("updateTopic", "-a", a, "-t", "R", "-q", "2")
    async with Producer(a) as producer:
        first = await producer.send("R", b"recalled", delay=1.5)
        assert first.scheduled and first.queue_offset == -1
        await producer.recall("R", first.msg_id)
        with pytest.raises(BrokerError) as info:
            await producer.recall("R", first.msg_id)
        assert info.value.code == ResponseCode.QUERY_NOT_FOUND
        with pytest.raises(ClientError):
            await producer.recall("R", "zz")
        results = await producer.send_batch(
            "R",
            [
                Message(body=b"b-now"),
                Message(body=b"b-later", delay=timedelta(seconds=2)),
                Message(body=b"b-now-2"),
                Message(body=b"b-at", deliver_at=int(time.time() * 1000) + 1000),
            ],
        )
    assert [r.queue_offset >= 0 for r in results] == [True, False, True, False]
    assert results[2].queue_offset == results[0].queue_offset + 1
    async with Consumer(a, "g", "R") as consumer:
        got: dict[bytes, str] = {}

        async def all_four() -> bool:
            for m in await consumer.receive(timeout=0.5):
                got[m.body] = m.properties.get("UNIQ_KEY", m.msg_id)
            return len(got) >= 4

        await wait_until_async(all_four, "the batch delivered", 20)
    # b-later was due after the recalled one, and deliveries go in due order: had the recall
    # not cancelled it, it would be here.
    assert set(got) == {b"b-now", b"b-later", b"b-now-2", b"b-at"}
    assert got[b"b-later"] == results[1].msg_id and got[b"b-at"] == results[3].msg_id
