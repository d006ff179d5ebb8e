"""queryMsgByTime and printMsg (rmqctl in this process, as test_rmqctl_lookup runs it) against a
lone broker process: three batches
stored at distinct times; a range finds exactly the middle batch over every queue (the broker's
byte limit, max_pull_bytes = 1024, cuts each queue's range into several pages, so the broker is
asked again from ``fromOffset``), --max keeps the oldest and says so, printMsg prints a queue's
range in offset order; bad input is one line and exit 1 or 2."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from client.lookup import Lookup
from client.producer import Producer
from tests.rmqctl.test_rmqctl_groups import ok_json, rmqctl
from tests.rmqctl.test_rmqctl_lookup import one_line_error
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def send_batch(address: str, key: str, count: int) -> list[tuple[str, int, int, int]]:
    """(msg id, queue, queue offset, store time) of each message sent with ``key``."""

    async def work() -> list[tuple[str, int, int, int]]:
        async with Producer(address) as p:
            sent = await asyncio.gather(
                *(p.send("T", f"{key}-{i}".encode(), keys=key) for i in range(count))
            )
        async with Lookup(address) as lookup:  # by id: the small pages cut key queries
            found = [await lookup.by_id(r.msg_id) for r in sent]
        return [
            (r.msg_id, r.queue_id, r.queue_offset, m.record.store_timestamp)
            for r, m in zip(sent, found, strict=True)
        ]

    return asyncio.run(work())


def after(ms: int) -> None:
    """Wait until the clock (the broker's: same host) is past ``ms``."""
    wait_until(lambda: time.time() * 1000 > ms + 2, "the clock to move on", 5, interval=0.005)


def test_query_by_time_and_print_msg_read_exactly_the_range(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    (tmp_path / "small-pages.toml").write_text("max_pull_bytes = 1024\n")
    broker = broker_factory(tmp_path, extra=["--config", str(tmp_path / "small-pages.toml")])
    a = broker.start_and_wait().address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    first = send_batch(a, "first", 10)
    after(max(t for *_, t in first))
    middle = send_batch(a, "middle", 60)  # about 30 a queue: several 1 KiB pages each
    after(max(t for *_, t in middle))
    last = send_batch(a, "last", 10)
    begin, end = min(t for *_, t in middle), max(t for *_, t in middle)
    assert max(t for *_, t in first) < begin and end < min(t for *_, t in last)

    doc = ok_json("queryMsgByTime", "-a", a, "-t", "T", "-b", str(begin), "-e", str(end))
    assert isinstance(doc, dict) and doc["truncated"] is False
    assert (doc["topic"], doc["begin"], doc["end"]) == ("T", begin, end)
    assert sorted(m["msgId"] for m in doc["messages"]) == sorted(m[0] for m in middle)
    times = [m["storeTimestamp"] for m in doc["messages"]]
    assert times == sorted(times)  # oldest first over both queues
    assert all(m["keys"] == "middle" and "body" not in m for m in doc["messages"])

    # --max: the oldest N, and a line on stderr saying more were there (exit status 0).
    capped = rmqctl(
        "--json", "queryMsgByTime", "-n", a, "-t", "T", "-b", str(begin), "-e", str(end),
        "--max", "5", "--body",
    )  # fmt: skip
    assert capped.returncode == 0, capped.stderr
    assert "more than 5 messages in the range" in capped.stderr
    small = json.loads(capped.stdout)
    assert small["truncated"] is True and len(small["messages"]) == 5
    fifth = sorted(m[3] for m in middle)[4]
    assert all(m["storeTimestamp"] <= fifth for m in small["messages"])
    assert {m["msgId"] for m in small["messages"]} <= {m[0] for m in middle}
    assert all(m["body"].startswith("middle-") for m in small["messages"])
    human = rmqctl("queryMsgByTime", "-a", a, "-t", "T", "-b", str(begin), "-e", str(end))
    assert human.returncode == 0 and human.stdout.startswith("Message ID")
    assert human.stdout.count("\n") == 61  # header and one row each

    # printMsg: one queue's range, in offset order, with bodies (mqadmin prints them).
    queue1 = sorted((m for m in middle if m[1] == 1), key=lambda m: m[2])
    doc = ok_json("printMsg", "-a", a, "-t", "T", "-q", "1", "-b", str(begin), "-e", str(end))
    assert isinstance(doc, dict)
    (q,) = doc["queues"]
    assert (q["brokerName"], q["queueId"], q["error"], q["truncated"]) == (
        "broker-a",
        1,
        None,
        False,
    )
    assert [m["msgId"] for m in q["messages"]] == [m[0] for m in queue1]
    assert [m["queueOffset"] for m in q["messages"]] == [m[2] for m in queue1]
    assert all(m["body"].startswith("middle-") for m in q["messages"])
    # Without a range: every message of every queue.
    every = ok_json("printMsg", "-a", a, "-t", "T", "--no-body")
    assert isinstance(every, dict)
    assert [len(q["messages"]) for q in every["queues"]] == [
        sum(1 for m in first + middle + last if m[1] == qid) for qid in (0, 1)
    ]
    text = rmqctl("printMsg", "-a", a, "-t", "T", "-q", "0", "-b", str(begin), "-e", str(end))
    assert text.returncode == 0 and text.stdout.startswith("broker-a queue 0: ")
    assert "BODY: middle-" in text.stdout
    # An empty range is no error for printMsg (mqadmin prints nothing), but is for a query.
    future = str(int(time.time() * 1000) + 3_600_000)
    empty = ok_json("printMsg", "-a", a, "-t", "T", "-b", future)
    assert isinstance(empty, dict) and all(q["messages"] == [] for q in empty["queues"])
    one_line_error(
        rmqctl("queryMsgByTime", "-a", a, "-t", "T", "-b", future, "-e", future),
        "no message of topic 'T' stored",
    )

    # Bad input: one line, exit status 1 (2 for what click refuses). The middle messages may
    # share one store time (the SDK batches concurrent sends): begin == end is a valid range.
    backwards = rmqctl("queryMsgByTime", "-a", a, "-t", "T", "-b", str(end + 1), "-e", str(begin))
    assert backwards.returncode == 2 and "is after --end" in backwards.stderr  # a usage error
    one_line_error(
        rmqctl("queryMsgByTime", "-a", a, "-t", "missing", "-b", "0", "-e", str(end)),
        "missing",
    )
    one_line_error(rmqctl("printMsg", "-a", a, "-t", "T", "-q", "7"), "queue 7 out of range")
    one_line_error(rmqctl("printMsg", "-a", a, "-t", "T", "--broker", "nope"), "'nope'")
    bad = rmqctl("queryMsgByTime", "-a", a, "-t", "T", "-b", "yesterday", "-e", "0")
    assert bad.returncode == 2 and "'yesterday' is not a time: give now, a time ago" in bad.stderr


def test_the_queries_take_the_times_reset_offset_by_time_takes(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    """queryMsgByTime, printMsg and queryMsgByKey take ``now``, a time ago (``-1h``) and
    mqadmin's ``yyyy-MM-dd#HH:mm:ss:SSS`` for -b/-e, as resetOffsetByTime -s does: what an
    operator types in an incident ("the last hour") is not a usage error."""
    a = broker_factory(tmp_path).start_and_wait().address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    sent = send_batch(a, "recent", 6)
    ids = sorted(m[0] for m in sent)
    after(max(t for *_, t in sent))

    doc = ok_json("queryMsgByTime", "-a", a, "-t", "T", "-b", "-1h", "-e", "now")
    assert isinstance(doc, dict) and sorted(m["msgId"] for m in doc["messages"]) == ids
    assert doc["end"] - doc["begin"] >= 3_600_000 and doc["end"] >= max(t for *_, t in sent)
    one_line_error(
        rmqctl("queryMsgByTime", "-a", a, "-t", "T", "-b", "-2h", "-e", "-1h"),
        "no message of topic 'T' stored",
    )
    hour_ago = time.strftime("%Y-%m-%d#%H:%M:%S:000", time.gmtime(time.time() - 3600))
    doc = ok_json("queryMsgByTime", "-a", a, "-t", "T", "-b", hour_ago, "-e", "now")
    assert isinstance(doc, dict) and sorted(m["msgId"] for m in doc["messages"]) == ids
    printed = ok_json("printMsg", "-a", a, "-t", "T", "-b", "-30m", "-e", "now", "--no-body")
    assert isinstance(printed, dict)
    assert sorted(m["msgId"] for q in printed["queues"] for m in q["messages"]) == ids
    by_key = ok_json("queryMsgByKey", "-a", a, "-t", "T", "-k", "recent", "-b", "-1h", "-e", "now")
    assert isinstance(by_key, dict) and sorted(m["msgId"] for m in by_key["messages"]) == ids
    bad = rmqctl("printMsg", "-a", a, "-t", "T", "-b", "+1h")
    assert bad.returncode == 2 and "'+1h' is not a time" in bad.stderr
