"""Idempotent sends against a real broker process (issue 29, docs/idempotence.md): a retry of a
stored request answers its offsets and stores nothing, also after a kill -9 and restart (the
state rebuilt from the records, and from a snapshot); bad input is refused with one clear
error and stores nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from broker.send.idempotence import _STEP_BYTES
from client.producer import Producer
from protocol.codes import RequestCode, ResponseCode
from protocol.idempotence import PROP_PRODUCER_SEQ, SEQ_FIELD, WINDOW, ProducerSeq
from protocol.message import MessageRecord, encode_properties, iter_records
from protocol.remoting import Frame, Scalar
from protocol.timer import PROP_TIMER_DELAY_MS
from protocol.transaction import PROP_PRODUCER_GROUP, PROP_TRANSACTION_ID, PROP_TRANSACTION_PREPARED
from remoting.client import RemotingClient
from tests.support.metrics import scrape
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

T = "idem"


def seq_fields(pid: int, epoch: int, seq: int) -> dict[str, int]:
    return {"producerId": pid, "producerEpoch": epoch, "sequence": seq}


async def send(
    conn: RemotingClient, body: bytes, pid: int, epoch: int, seq: int, queue: int = 0, **extra: str
) -> Frame:
    header: dict[str, Scalar] = {"topic": T, "queueId": queue, **seq_fields(pid, epoch, seq)}
    header.update(extra)
    return await conn.request(RequestCode.SEND_MESSAGE, header, body)


async def pull_all(conn: RemotingClient, queue: int = 0) -> list[MessageRecord]:
    resp = await conn.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "c",
            "topic": T,
            "queueId": queue,
            "queueOffset": 0,
            "maxMsgNums": 1000,
            "suspendTimeoutMillis": 0,
        },
    )
    if resp.code != ResponseCode.SUCCESS:
        return []
    return list(iter_records(resp.body or b""))


async def killed_and_restarted(proc: BrokerProc) -> RemotingClient:
    """kill -9 the broker, start it again on its data, and a connection to it."""
    proc.kill9()
    proc.stop()
    proc.start_and_wait()
    return await RemotingClient.connect(proc.address)


def state_builds(proc: BrokerProc) -> list[dict[str, Any]]:
    """The broker's log lines of each idempotence state it built, oldest first."""
    return [
        json.loads(line)
        for line in proc.log().splitlines()
        if "idempotent producer state built from the CommitLog" in line
    ]


async def test_a_retry_answers_the_stored_offsets_and_stores_nothing(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 2})
        first = await send(conn, b"a", 7, 0, 0)
        assert first.code == ResponseCode.SUCCESS, first.header
        again = await send(conn, b"a", 7, 0, 0)
        assert again.code == ResponseCode.SUCCESS, again.header
        assert again.header == first.header  # msgId, queue, offset
        # the same sequence on another queue is another request
        other = await send(conn, b"q1", 7, 0, 0, queue=1)
        assert other.code == ResponseCode.SUCCESS and other.header["queueId"] == 1
        # a batch and its retry
        batch = msgpack.packb([{"body": b"b1"}, {"body": b"b2"}, {"body": b"b3"}])
        header: dict[str, Scalar] = {"topic": T, "queueId": 0, **seq_fields(7, 0, 1)}
        b1 = await conn.request(RequestCode.SEND_BATCH_MESSAGE, header, batch)
        b2 = await conn.request(RequestCode.SEND_BATCH_MESSAGE, header, batch)
        assert b1.code == b2.code == ResponseCode.SUCCESS
        assert (b1.header, b1.body) == (b2.header, b2.body)
        records = await pull_all(conn)
        assert [r.body for r in records] == [b"a", b"b1", b"b2", b"b3"]
        assert records[0].producer_seq == "7.0.0.0.1"
        assert records[3].producer_seq == "7.0.1.2.3"
        assert PROP_PRODUCER_SEQ not in records[0].properties  # the broker's, not the message's
    finally:
        conn.close()


async def test_producer_seq_and_the_three_fields_of_earlier_sdks_name_the_same_request(
    broker: BrokerProc,
) -> None:
    # The SDK sends one binary field, producerSeq; SDKs before it sent three integers.
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 1})
        packed: dict[str, Scalar] = {"topic": T, "queueId": 0}
        ProducerSeq(11, 0, 0).add_to(packed)
        first = await conn.request(RequestCode.SEND_MESSAGE, packed, b"p")
        assert first.code == ResponseCode.SUCCESS, first.header
        legacy = await send(conn, b"p", 11, 0, 0)
        assert legacy.code == ResponseCode.SUCCESS and legacy.header == first.header
        again = await conn.request(RequestCode.SEND_MESSAGE, packed, b"p")
        assert again.header == first.header
        bad_headers: list[dict[str, Scalar]] = [
            {"topic": T, "queueId": 0, SEQ_FIELD: b"\x00" * 19},
            {**packed, **seq_fields(11, 0, 1)},
        ]
        for bad in bad_headers:
            refused = await conn.request(RequestCode.SEND_MESSAGE, bad, b"x")
            assert refused.code == ResponseCode.BAD_REQUEST, refused.header
            assert SEQ_FIELD in str(refused.header.get("remark"))
        assert [r.body for r in await pull_all(conn)] == [b"p"]
    finally:
        conn.close()


async def test_bad_input_is_refused_and_stores_nothing(broker: BrokerProc) -> None:
    conn = await RemotingClient.connect(broker.address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 1})
        assert (await send(conn, b"e3", 9, 3, 0)).code == ResponseCode.SUCCESS
        # a stale epoch of the same producer id is fenced
        stale = await send(conn, b"e2", 9, 2, 0)
        assert stale.code == ResponseCode.PRODUCER_FENCED, stale.header
        assert "fenced" in str(stale.header.get("remark"))
        # a sequence that jumps is stored (an earlier request may still come) ...
        assert (await send(conn, b"jump", 9, 3, 5)).code == ResponseCode.SUCCESS
        # ... and one far below a full window cannot be told apart
        for s in range(6, 6 + WINDOW):
            assert (await send(conn, b"w%d" % s, 9, 3, s)).code == ResponseCode.SUCCESS
        old = await send(conn, b"old", 9, 3, 1)
        assert old.code == ResponseCode.SEQUENCE_TOO_OLD, old.header
        # some of the fields but not all, a bad value, the broker's pick of the queue
        partial = await conn.request(
            RequestCode.SEND_MESSAGE,
            {"topic": T, "queueId": 0, "producerId": 9, "sequence": 99},
            b"x",
        )
        assert partial.code == ResponseCode.BAD_REQUEST, partial.header
        negative = await send(conn, b"x", 9, 3, -1)
        assert negative.code == ResponseCode.BAD_REQUEST, negative.header
        pick = await send(conn, b"x", 9, 3, 100, queue=-1)
        assert pick.code == ResponseCode.BAD_REQUEST, pick.header
        # a sequence reused for a request of another size
        batch = msgpack.packb([{"body": b"1"}, {"body": b"2"}])
        reuse = await conn.request(
            RequestCode.SEND_BATCH_MESSAGE,
            {"topic": T, "queueId": 0, **seq_fields(9, 3, 6 + WINDOW - 1)},
            batch,
        )
        assert reuse.code == ResponseCode.BAD_REQUEST, reuse.header
        # a send without the fields cannot bring the property in
        forged = await conn.request(
            RequestCode.SEND_MESSAGE,
            {
                "topic": T,
                "queueId": 0,
                "properties": encode_properties(
                    {PROP_PRODUCER_SEQ: "1.0.0.0.1", "k": "v"}
                ).decode(),
            },
            b"forged",
        )
        assert forged.code == ResponseCode.SUCCESS
        records = await pull_all(conn)
        assert [r.body for r in records] == [
            b"e3",
            b"jump",
            *(b"w%d" % s for s in range(6, 6 + WINDOW)),
            b"forged",
        ]
        assert PROP_PRODUCER_SEQ not in records[-1].properties
        assert records[-1].producer_seq is None
        assert records[-1].properties["k"] == "v"
    finally:
        conn.close()
    assert broker.alive()


@pytest.mark.parametrize("snapshot", [False, True], ids=["from-records", "from-snapshot"])
async def test_a_restarted_broker_answers_retries_of_what_it_stored(
    tmp_path: Path, snapshot: bool
) -> None:
    """kill -9 and restart: the state is rebuilt from the CommitLog's records (and from the
    last snapshot, with 1 MiB between snapshots, and records after it)."""
    toml = "producer_snapshot_bytes = 1048576\n" if snapshot else ""
    proc = BrokerProc(tmp_path, extra_toml=toml).start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 1})
        answers = {}
        big = b"x" * 64 * 1024
        count = 40 if snapshot else 3  # 2.5 MiB: two snapshots, then records after them
        for s in range(count):
            resp = await send(conn, big if snapshot else b"m%d" % s, 11, 0, s)
            assert resp.code == ResponseCode.SUCCESS
            answers[s] = resp.header
        conn.close()
        conn = await killed_and_restarted(proc)
        try:
            for s in range(count - WINDOW if count > WINDOW else 0, count):
                again = await send(conn, big if snapshot else b"m%d" % s, 11, 0, s)
                assert again.code == ResponseCode.SUCCESS, again.header
                assert again.header == answers[s]
            assert len(await pull_all(conn)) == count
        finally:
            conn.close()
        built = state_builds(proc)
        assert built and built[-1]["snapshot"] is snapshot, built
        if snapshot:  # only the records after the last snapshot were read
            assert built[-1]["scanned_from"] > 0, built
    finally:
        proc.stop()


async def test_half_and_scheduled_messages_are_deduplicated_also_after_a_restart(
    tmp_path: Path,
) -> None:
    """A transactional half and a scheduled message are stored under the broker's own topics:
    their retries still count in the queue they were sent to (REAL_TOPIC/REAL_QID), before and
    after a kill -9; the delivered copy of a scheduled message carries no __PSEQ."""
    proc = BrokerProc(tmp_path).start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 1})
        half = encode_properties(
            {PROP_TRANSACTION_PREPARED: "true", PROP_PRODUCER_GROUP: "g", PROP_TRANSACTION_ID: "t1"}
        ).decode()
        later = encode_properties({PROP_TIMER_DELAY_MS: "600000"}).decode()
        soon = encode_properties({PROP_TIMER_DELAY_MS: "500"}).decode()
        sends = [(b"half", half, 0), (b"later", later, 1), (b"soon", soon, 2)]
        first = {}
        for body, props, s in sends:
            resp = await send(conn, body, 21, 0, s, properties=props)
            assert resp.code == ResponseCode.SUCCESS, resp.header
            again = await send(conn, body, 21, 0, s, properties=props)
            assert again.header == resp.header
            first[s] = resp.header

        async def delivered() -> list[MessageRecord] | None:
            records = await pull_all(conn)
            return records if [r.body for r in records] == [b"soon"] else None

        records = await wait_until_async(delivered, "the scheduled message delivered", 30)
        assert records is not None
        assert records[0].producer_seq is None  # the delivered copy is no send of the producer
        conn.close()
        conn = await killed_and_restarted(proc)
        try:
            for body, props, s in sends:
                again = await send(conn, body, 21, 0, s, properties=props)
                assert again.code == ResponseCode.SUCCESS, again.header
                assert again.header["msgId"] == first[s]["msgId"], (body, again.header)
            assert [r.body for r in await pull_all(conn)] == [b"soon"]
        finally:
            conn.close()
    finally:
        proc.stop()


async def test_the_uniq_key_window_answers_retries_of_clients_without_the_fields(
    tmp_path: Path,
) -> None:
    """uniq_key_window_topics: a send without the fields whose UNIQ_KEY was stored within the
    window is answered with the stored offsets (also after kill -9 and restart, rebuilt from
    the records); a topic not listed keeps storing every retry."""
    proc = BrokerProc(tmp_path, extra_toml='uniq_key_window_topics = "U"\n').start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        for topic in ("U", "V"):
            await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "queues": 1})

        async def plain(topic: str, body: bytes, key: str) -> Frame:
            props = encode_properties({"UNIQ_KEY": key}).decode()
            return await conn.request(
                RequestCode.SEND_MESSAGE,
                {"topic": topic, "queueId": -1, "properties": props},
                body,
            )

        first = await plain("U", b"a", "K1")
        assert (await plain("U", b"a", "K1")).header == first.header
        assert (await plain("U", b"b", "K2")).header != first.header
        assert (await plain("V", b"a", "K1")).header != (await plain("V", b"a", "K1")).header
        conn.close()
        conn = await killed_and_restarted(proc)
        try:
            assert (await plain("U", b"a", "K1")).header == first.header
            resp = await conn.request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "c",
                    "topic": "U",
                    "queueId": 0,
                    "queueOffset": 0,
                    "maxMsgNums": 100,
                    "suspendTimeoutMillis": 0,
                },
            )
            assert [r.body for r in iter_records(resp.body or b"")] == [b"a", b"b"]
        finally:
            conn.close()
    finally:
        proc.stop()


async def test_the_uniq_key_windows_answers_are_counted_on_the_metrics_port(
    tmp_path: Path,
) -> None:
    """An operator sees how many retries the UNIQ_KEY window answered: two retries of a send
    to a listed topic count 2 in rmq_broker_uniq_key_duplicates_total; a new key, none."""
    port = free_port()
    proc = BrokerProc(
        tmp_path, extra=["--metrics-port", str(port)], extra_toml='uniq_key_window_topics = "U"\n'
    ).start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        try:
            await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "U", "queues": 1})
            for key in ("K1", "K1", "K1", "K2"):
                props = encode_properties({"UNIQ_KEY": key}).decode()
                resp = await conn.request(
                    RequestCode.SEND_MESSAGE,
                    {"topic": "U", "queueId": -1, "properties": props},
                    b"a",
                )
                assert resp.code == ResponseCode.SUCCESS, resp.header
        finally:
            conn.close()
        text = await asyncio.to_thread(scrape, port)
        counted = [
            line
            for line in text.splitlines()
            if line.startswith("rmq_broker_uniq_key_duplicates_total{")
        ]
        assert [float(line.rsplit(" ", 1)[1]) for line in counted] == [2.0], counted
    finally:
        proc.stop()


async def test_a_topic_with_idempotence_off_refuses_the_fields_and_the_sdk_sends_without(
    tmp_path: Path,
) -> None:
    """idempotence_off_topics: a send with the three fields to a listed topic is refused
    (IDEMPOTENCE_OFF) and stores nothing; without them it is stored, and a retry is stored
    again (the topic keeps at-least-once). The SDK, idempotent by default, sends such a topic's
    messages again without the fields, and keeps sending them so."""
    proc = BrokerProc(tmp_path, extra_toml='idempotence_off_topics = "plain"\n').start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        try:
            await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "plain", "queues": 1})
            header: dict[str, Scalar] = {"topic": "plain", "queueId": 0, **seq_fields(5, 0, 0)}
            refused = await conn.request(RequestCode.SEND_MESSAGE, header, b"x")
            assert refused.code == ResponseCode.IDEMPOTENCE_OFF, refused.header
            assert "idempotence_off_topics" in str(refused.header.get("remark"))
            batch = msgpack.packb([{"body": b"b1"}, {"body": b"b2"}])
            refused = await conn.request(RequestCode.SEND_BATCH_MESSAGE, header, batch)
            assert refused.code == ResponseCode.IDEMPOTENCE_OFF, refused.header
            async with Producer(proc.address, auto_batch=False) as producer:
                sent = [await producer.send("plain", b"sdk%d" % i) for i in range(3)]
                assert producer.idempotent and "plain" in producer._router.plain_topics
            assert [s.queue_offset for s in sent] == [0, 1, 2]
            plain = {"topic": "plain", "queueId": 0}
            first = await conn.request(RequestCode.SEND_MESSAGE, plain, b"y")
            again = await conn.request(RequestCode.SEND_MESSAGE, plain, b"y")
            assert first.code == again.code == ResponseCode.SUCCESS
            assert first.header["queueOffset"] != again.header["queueOffset"]
            records = await pull_all_of(conn, "plain")
            assert [r.body for r in records] == [b"sdk0", b"sdk1", b"sdk2", b"y", b"y"]
            assert all(r.producer_seq is None for r in records)
            # every other topic keeps idempotence
            await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 1})
            one = await send(conn, b"i", 5, 0, 0)
            assert (await send(conn, b"i", 5, 0, 0)).header == one.header
        finally:
            conn.close()
    finally:
        proc.stop()


async def pull_all_of(conn: RemotingClient, topic: str) -> list[MessageRecord]:
    resp = await conn.request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "c",
            "topic": topic,
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 1000,
            "suspendTimeoutMillis": 0,
        },
    )
    assert resp.code == ResponseCode.SUCCESS, resp.header
    return list(iter_records(resp.body or b""))


async def test_the_broker_answers_other_requests_while_it_rebuilds_the_state(
    tmp_path: Path,
) -> None:
    """The rebuild after a restart reads the log in steps, the loop free between them: sends
    without the fields, on the same connection, are sent and answered while the sequenced send
    that started the rebuild waits for it (the order of events, not their times); that send is
    answered as the retry it is. With the rebuild in one go on the loop, no request sent after
    it was answered before it."""
    proc = BrokerProc(
        tmp_path, extra_toml="producer_snapshot_bytes = 1073741824\nscrub_bytes_per_s = 0\n"
    )
    proc.start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 4})
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "other", "queues": 1})
        batch = msgpack.packb([{"body": b"r%05d" % i} for i in range(256)])
        last: Frame | None = None
        sends = 1600  # 409,600 sequenced records
        for s in range(0, sends, 16):
            answers = await asyncio.gather(
                *(
                    conn.request(
                        RequestCode.SEND_BATCH_MESSAGE,
                        {"topic": T, "queueId": q % 4, **seq_fields(900 + q, 0, s)},
                        batch,
                    )
                    for q in range(16)
                )
            )
            assert all(a.code == ResponseCode.SUCCESS for a in answers)
            last = answers[-1]
        assert last is not None
        conn.close()
        conn = await killed_and_restarted(proc)
        try:
            # the store recovers (not closed cleanly) before the broker answers a send
            opened = await conn.request(
                RequestCode.SEND_MESSAGE, {"topic": "other", "queueId": 0}, b"o", timeout=120
            )
            assert opened.code == ResponseCode.SUCCESS, opened.header
            gaps: list[float] = []
            # Each plain send's (sent, answered) places in one order of events, and the retry's.
            order = itertools.count()
            plain: list[tuple[int, int]] = []
            stop = asyncio.Event()

            async def others() -> None:
                while not stop.is_set():
                    t0, sent = time.perf_counter(), next(order)
                    resp = await conn.request(
                        RequestCode.SEND_MESSAGE, {"topic": "other", "queueId": 0}, b"o", timeout=60
                    )
                    assert resp.code == ResponseCode.SUCCESS, resp.header
                    plain.append((sent, next(order)))
                    gaps.append(time.perf_counter() - t0)

            task = asyncio.create_task(others())
            await wait_until_async(
                lambda: len(gaps) >= 3, "plain sends answered", 30, on_timeout=proc.log
            )
            before = len(gaps)
            t0, retry_sent = time.perf_counter(), next(order)
            retry = await conn.request(
                RequestCode.SEND_BATCH_MESSAGE,
                {"topic": T, "queueId": 15 % 4, **seq_fields(915, 0, sends - 16)},
                batch,
                timeout=120,
            )
            retry_answered = next(order)
            waited = time.perf_counter() - t0
            stop.set()
            await task
            assert retry.code == ResponseCode.SUCCESS, retry.header
            assert (retry.header, retry.body) == (last.header, last.body)
        finally:
            conn.close()

        def built() -> list[dict[str, Any]]:
            return [b for b in state_builds(proc) if b["records"]]

        rebuilt = (await wait_until_async(built, "the rebuild's log line", 30))[-1]
        assert rebuilt["records"] == sends * 256, rebuilt
        seconds = rebuilt["seconds"]
        during = gaps[before:]
        print(f"rebuild {seconds} s of {rebuilt['scanned_bytes']:,} bytes (the retry waited "
              f"{waited:.2f} s); {len(during)} plain sends answered meanwhile, the slowest in "
              f"{max(during):.3f} s")  # fmt: skip
        # The build had many steps to give the loop between (512 KiB of log each) ...
        assert rebuilt["scanned_bytes"] >= 64 * _STEP_BYTES, rebuilt
        # ... and other requests were sent and answered while the retry waited for it: a send
        # needs the loop once between two steps. In one go on the loop only the few requests
        # handled before the build began could be (2 when it was tried).
        inside = [(a, b) for a, b in plain if retry_sent < a and b < retry_answered]
        assert len(inside) >= 10, (
            f"{len(inside)} plain sends were sent and answered while the retry waited for the "
            f"rebuild (the retry sent at event {retry_sent}, answered at {retry_answered}; "
            f"plain sends' (sent, answered) events: {plain[-6:]})"
        )
    finally:
        proc.stop()


async def test_producers_forgotten_are_not_counted_again_when_the_state_is_rebuilt(
    tmp_path: Path,
) -> None:
    """rmq_broker_idempotent_producers_expired_total counts producers the master forgot while
    serving. Rebuilding the state from the log after a restart forgets the same least recently
    used producers again: that is no new forgetting, and was counted a second time."""
    port = free_port()

    def forgotten() -> list[float]:
        text = scrape(port)
        return [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("rmq_broker_idempotent_producers_expired_total")
        ]

    proc = BrokerProc(
        tmp_path, extra=["--metrics-port", str(port)], extra_toml="producer_max_windows = 2\n"
    ).start_and_wait()
    try:
        conn = await RemotingClient.connect(proc.address)
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": T, "queues": 1})
        answers = {}
        for pid in (1, 2, 3, 4):  # a window each: the two least recently used are forgotten
            resp = await send(conn, b"p%d" % pid, pid, 0, 0)
            assert resp.code == ResponseCode.SUCCESS, resp.header
            answers[pid] = resp.header
        conn.close()
        assert await asyncio.to_thread(forgotten) == [2.0]
        conn = await killed_and_restarted(proc)
        try:  # the retry makes the new process build the state from the records
            again = await send(conn, b"p4", 4, 0, 0)
            assert again.code == ResponseCode.SUCCESS and again.header == answers[4]
        finally:
            conn.close()
        # the restarted process's build (its log line is written by a thread of its own)
        await wait_until_async(
            lambda: len(state_builds(proc)) == 2, "the second build's log line", 10
        )
        assert state_builds(proc)[-1]["records"] == 4
        assert await asyncio.to_thread(forgotten) == [0.0]
    finally:
        proc.stop()
