"""Transactional messages against a real lone broker (issue 12 item 3): a committed message is
consumed exactly once, a rolled back one never; a producer process killed -9 before resolving
leaves its halves to the check-back, which a new producer instance of the same group answers;
a half no producer answers is discarded after the maximum of checks; an unknown transaction
id, the opposite of a resolution and a send to the system topics are refused, storing nothing."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import msgpack
import pytest

from client.admin import Admin
from client.errors import BrokerError
from client.message import SendResult
from client.simple_consumer import PopMessage, SimpleConsumer
from client.transaction import (
    Transaction,
    TransactionCheck,
    TransactionProducer,
    TransactionStatus,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Scalar
from protocol.transaction import COMMIT_TYPE, HALF_TOPIC, PROP_HALF_OFFSET
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc, Daemon, small_segments_config
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

CHECK_CONFIG = (
    "transaction_check_first_ms = 1500\n"
    "transaction_check_interval_ms = 1000\n"
    "transaction_check_max = 2\n"
)


def _never(check: TransactionCheck) -> TransactionStatus:
    raise AssertionError(f"no check-back expected: {check}")


async def _consume(address: str, group: str, want: int, quiet: float) -> list[PopMessage]:
    """Everything group ``group`` receives from T: until ``want`` arrived, then ``quiet``
    seconds more to catch a duplicate."""
    got: list[PopMessage] = []
    async with SimpleConsumer(address, group, "T") as consumer:
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got += await consumer.receive(16, invisible_duration=60, wait=1.0)
        got += await consumer.receive(16, invisible_duration=60, wait=quiet)
    return got


async def test_commit_is_seen_once_rollback_never_and_bad_ends_are_refused(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    broker = broker_factory(tmp_path).start_and_wait()
    async with Admin(broker.address) as admin:
        await admin.create_topic("T", 2)
    async with TransactionProducer(broker.address, "PG", _never) as tp:
        committed = await tp.send_transaction("T", b"yes", keys="k1")
        rolled_back = await tp.send_transaction("T", b"no", keys="k2")
        # Nothing is visible before the commit.
        assert await _consume(broker.address, "early", 0, 1.0) == []
        assert await committed.commit() is True
        assert await rolled_back.rollback() is True
        # Repeats: the same answer without writing; the opposite is refused.
        assert await committed.commit() is False
        assert await rolled_back.rollback() is False
        with pytest.raises(BrokerError) as exc:
            await committed.rollback()
        assert exc.value.code == ResponseCode.TRANSACTION_ALREADY_RESOLVED
        with pytest.raises(BrokerError) as exc:
            await rolled_back.commit()
        assert exc.value.code == ResponseCode.TRANSACTION_ALREADY_RESOLVED

    got = await _consume(broker.address, "C", 1, 1.5)
    assert [m.body for m in got] == [b"yes"]
    assert got[0].record.properties[PROP_HALF_OFFSET] == str(committed.half_offset)
    assert "TRAN_MSG" not in got[0].record.properties  # forwarded as is, it is no half
    assert got[0].record.keys == "k1"

    conn = await RemotingClient.connect(broker.address)
    try:
        max_before = await _max_offset(conn)
        headers: list[dict[str, Scalar]] = [
            {"transactionId": "nope", "commitLogOffset": -1},
            {"transactionId": committed.transaction_id, "commitLogOffset": 1},
            {"transactionId": "nope", "commitLogOffset": committed.half_offset},
        ]
        for header in headers:
            resp = await conn.request(
                RequestCode.END_TRANSACTION,
                {"producerGroup": "PG", "commitOrRollback": COMMIT_TYPE, **header},
            )
            assert resp.code == ResponseCode.TRANSACTION_NOT_FOUND, resp
            assert "no transaction" in str(resp.header.get("remark"))
        # Another producer group's transaction is not found either.
        resp = await conn.request(
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": "other",
                "transactionId": committed.transaction_id,
                "commitLogOffset": committed.half_offset,
                "commitOrRollback": COMMIT_TYPE,
            },
        )
        assert resp.code == ResponseCode.TRANSACTION_NOT_FOUND
        resp = await conn.request(
            RequestCode.END_TRANSACTION,
            {"producerGroup": "PG", "transactionId": "x", "commitOrRollback": 5},
        )
        assert resp.code == ResponseCode.BAD_REQUEST
        resp = await conn.request(RequestCode.SEND_MESSAGE, {"topic": HALF_TOPIC}, b"forged")
        assert resp.code == ResponseCode.NO_PERMISSION
        assert await _max_offset(conn) == max_before  # nothing stored
    finally:
        conn.close()


async def _max_offset(conn: RemotingClient) -> int:
    resp = await conn.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
    value = msgpack.unpackb(resp.body or b"\x80", raw=False).get("maxOffset")
    if not isinstance(value, int):
        raise AssertionError(f"no maxOffset in {resp}")
    return value


async def test_a_new_producer_of_the_group_answers_the_check_back(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    config = small_segments_config(tmp_path, "txn", CHECK_CONFIG)
    broker = broker_factory(tmp_path, extra=["--config", str(config)]).start_and_wait()
    async with Admin(broker.address) as admin:
        await admin.create_topic("T", 2)
    # The first producer, a process of its own, sends two halves and is killed -9 before
    # resolving either.
    out = tmp_path / "halves.json"
    first = Daemon(
        "producer",
        [sys.executable, "-c", _PRODUCER, broker.address, str(out)],
        tmp_path / "producer.log",
    )
    first.start()
    try:
        wait_until(out.exists, "the producer process to send its halves", 30)
        first.kill9()
    finally:
        first.stop()
    halves = json.loads(out.read_text())
    keep_id, drop_id = halves["keep"][0], halves["drop"][0]
    async with TransactionProducer(broker.address, "LOST", _never) as tp:
        await tp.send_transaction("T", b"orphan", keys="orphan")

    asked: list[TransactionCheck] = []

    async def checker(check: TransactionCheck) -> TransactionStatus:
        asked.append(check)
        return TransactionStatus.COMMIT if check.keys == "keep" else TransactionStatus.ROLLBACK

    async with TransactionProducer(broker.address, "PG", checker, topics=["T"]) as again:
        await wait_until_async(lambda: again.checks_answered >= 2, "two checks answered", 30)
        assert {c.transaction_id for c in asked} == {keep_id, drop_id}
        assert {c.topic for c in asked} == {"T"}
        got = await _consume(broker.address, "C", 1, 1.5)
        assert [m.body for m in got] == [b"keep"]
        # Resolved by the check: a commit now answers "already", the opposite is refused.
        keep = Transaction(again, "T", keep_id, _result(halves["keep"]))
        assert await keep.commit() is False
        drop = Transaction(again, "T", drop_id, _result(halves["drop"]))
        with pytest.raises(BrokerError) as exc:
            await drop.commit()
        assert exc.value.code == ResponseCode.TRANSACTION_ALREADY_RESOLVED
    # No producer of LOST ever answers: discarded after transaction_check_max checks.
    wait_until(
        lambda: "transaction discarded" in broker.log(), "the orphan half to be discarded", 30
    )
    assert "orphan" not in [m.body.decode() for m in got]


_PRODUCER = """
import asyncio, json, sys
from client.transaction import TransactionProducer

def never(check):
    raise AssertionError("not asked")

async def main(address, out):
    tp = TransactionProducer(address, "PG", never)
    await tp.start()
    halves = {}
    for key in ("keep", "drop"):
        txn = await tp.send_transaction("T", key.encode(), keys=key)
        halves[key] = [txn.transaction_id, txn.half.msg_id, txn.half.broker_name]
    with open(out + ".tmp", "w") as f:
        json.dump(halves, f)
    import os
    os.rename(out + ".tmp", out)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def _result(half: list[str]) -> SendResult:
    return SendResult(msg_id=half[1], broker_name=half[2], queue_id=0, queue_offset=0)
