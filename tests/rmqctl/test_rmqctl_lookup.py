"""queryMsgById, queryMsgByKey and queryMsgByOffset against a lone broker process: round trips,
the key index across a restart, rebuilt when its files are deleted or one is corrupted, and bad
input answered with one line and exit status 1. rmqctl runs in this process (click's runner: the
same exit codes and output as ``python -m rmqctl``, whose process test_rmqctl_broker_process
runs), not a Python start per command."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from client.message import SendResult
from client.producer import Producer
from storage.index.format import HEADER_SIZE
from tests.rmqctl.test_rmqctl_groups import ok_json, rmqctl
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def send(address: str, count: int) -> list[SendResult]:
    async def work() -> list[SendResult]:
        async with Producer(address) as p:
            return [
                await p.send("T", f"body-{i}".encode(), keys=f"order-{i % 3} all", tags="TagA")
                for i in range(count)
            ]

    return asyncio.run(work())


def by_key(address: str, key: str) -> list[str]:
    doc = ok_json("queryMsgByKey", "-a", address, "-t", "T", "-k", key)
    assert isinstance(doc, dict)
    return [m["msgId"] for m in doc["messages"]]


def one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("rmqctl: ") and needle in proc.stderr, proc.stderr


def test_lookups_round_trip_and_the_index_survives_restarts_deletion_and_corruption(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    # Small index files (16 entries each): 40 messages with two keys make several files. The
    # second --config replaces the small-segments one.
    broker = broker_factory(tmp_path, extra=["--config", str(tmp_path / "small-index.toml")])
    (tmp_path / "small-index.toml").write_text(
        "index_entries_per_file = 16\nindex_slots_per_file = 4\ncommitlog_segment_bytes = 8388608\n"
    )
    broker.start_and_wait()
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    sent = send(a, 40)
    ids = [r.msg_id for r in sent]

    assert by_key(a, "all") == ids
    assert by_key(a, "order-1") == ids[1::3]
    # --max keeps each broker group's newest N and says so on stderr (it said nothing).
    capped = rmqctl("--json", "queryMsgByKey", "-a", a, "-t", "T", "-k", "all", "--max", "5")
    assert capped.returncode == 0, capped.stderr
    doc = json.loads(capped.stdout)
    assert doc["truncated"] is True and [m["msgId"] for m in doc["messages"]] == ids[-5:]
    assert "broker-a answered --max 5 messages, the newest: there may be more" in capped.stderr
    whole = rmqctl("--json", "queryMsgByKey", "-a", a, "-t", "T", "-k", "all")
    assert whole.returncode == 0 and whole.stderr == ""
    assert json.loads(whole.stdout)["truncated"] is False
    r = sent[7]
    doc = ok_json("queryMsgById", "-a", a, "-i", ids[7], "--body")
    assert isinstance(doc, dict)
    assert (doc["msgId"], doc["body"], doc["keys"], doc["tags"]) == (
        ids[7],
        "body-7",
        "order-1 all",
        "TagA",
    )
    assert doc["storeHost"] == a and doc["storeTimestamp"] > 0
    assert doc["properties"] == {"KEYS": "order-1 all", "TAGS": "TagA"}
    doc = ok_json(
        "queryMsgByOffset", "-a", a, "-t", "T", "-b", r.broker_name,
        "-q", str(r.queue_id), "-o", str(r.queue_offset),
    )  # fmt: skip
    assert isinstance(doc, dict) and doc["msgId"] == ids[7] and "body" not in doc
    human = rmqctl("queryMsgById", "-a", a, "-i", ids[7], "--body")
    assert human.returncode == 0
    for label in ("Store Timestamp:", "Store Host:", "Properties:", "Body:             body-7"):
        assert label in human.stdout, human.stdout

    # Bad input: one line, exit 1.
    one_line_error(rmqctl("queryMsgById", "-a", a, "-i", "not-an-id"), "not a message id")
    one_line_error(
        rmqctl("queryMsgById", "-a", a, "-i", ids[7][:16] + "00000000000FFFFF"), "not found"
    )
    one_line_error(rmqctl("queryMsgByKey", "-a", a, "-t", "Nope", "-k", "x"), "does not exist")
    one_line_error(rmqctl("queryMsgByKey", "-a", a, "-t", "T", "-k", "none"), "no message")
    backwards = rmqctl(
        "queryMsgByKey", "-a", a, "-t", "T", "-k", "all", "--begin", "9", "--end", "3"
    )
    assert backwards.returncode == 2 and "after --end" in backwards.stderr  # a usage error
    one_line_error(
        rmqctl("queryMsgByKey", "-a", a, "-t", "T", "-k", "all", "--end", "2001-01-01"),
        "no index covers",
    )
    in_q0 = sum(1 for m in sent if m.queue_id == 0)
    one_line_error(
        rmqctl("queryMsgByOffset", "-a", a, "-t", "T", "-b", "broker-a", "-q", "0", "-o", "999"),
        f"no committed message at offset 999 of T:0 on broker-a: offset 999 is not in the "
        f"queue, which holds offsets 0..{in_q0 - 1} (OFFSET_OVERFLOW)",
    )  # it said "outside 0..N", N the next offset, as if N were there
    bad = rmqctl("queryMsgByKey", "-a", a, "-t", "T", "-k", "all", "--begin", "yesterday")
    assert bad.returncode == 2 and "'yesterday' is not a time" in bad.stderr
    # The controllers do not answer (-a names nobody): the store host in the id still does, and
    # the Broker line gives its address without an empty broker name before it.
    nobody = f"127.0.0.1:{free_port()}"
    human = rmqctl("queryMsgById", "-a", nobody, "-i", ids[7])
    assert human.returncode == 0, human.stderr
    assert f"\nBroker:           {a}\n" in human.stdout, human.stdout

    # A clean restart trusts the files; deleted or corrupted files are rebuilt.
    files = sorted((broker.data_dir / "index").iterdir())
    assert len(files) >= 3
    broker.stop()
    broker.start_and_wait()
    assert by_key(a, "all") == ids and "not trusted" not in broker.log()
    broker.stop()
    shutil.rmtree(broker.data_dir / "index")
    broker.start_and_wait()
    assert by_key(a, "all") == ids and by_key(a, "order-2") == ids[2::3]
    broker.stop()
    files = sorted((broker.data_dir / "index").iterdir())
    with files[1].open("r+b") as f:
        f.seek(HEADER_SIZE + 4 * 4 + 5)  # the first entry's CommitLog offset
        f.write(b"\x7f\x7f\x7f")
    broker.start_and_wait()
    assert by_key(a, "all") == ids and by_key(a, "order-0") == ids[0::3]
    line = f"index file {files[1].name} not trusted (body CRC mismatch)"
    wait_until(lambda: line in broker.log(), "the index file's distrust logged", 10)
    # The lookup by key after a kill -9 (the unsealed file is rebuilt).
    more = send(a, 3)
    broker.kill9()
    broker.start_and_wait()
    assert by_key(a, "all") == ids + [r.msg_id for r in more]
    doc = ok_json("queryMsgById", "-a", a, "-i", more[2].msg_id, "--body")
    assert isinstance(doc, dict) and doc["body"] == "body-2"


def test_query_by_id_takes_a_classic_clients_unique_key_shaped_like_an_offset_id(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    """A classic RocketMQ client's unique key has our offset id's 32 hex digits: not found at
    the offset it seems to name, queryMsgById tries it as a unique key (as mqadmin falls back),
    with or without -t. Before, it answered 'not found'."""
    broker = broker_factory(tmp_path).start_and_wait()
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    uniq = "7F0000010000000021B2C3D4000A0001"  # ip, pid, class loader, time, counter

    async def work() -> SendResult:
        async with Producer(a) as p:
            await p.send("T", b"before")
            return await p.send("T", b"classic", properties={"UNIQ_KEY": uniq})

    sent = asyncio.run(work())
    for extra in ([], ["-t", "T"]):
        doc = ok_json("queryMsgById", "-a", a, "-i", uniq, *extra, "--body")
        assert isinstance(doc, dict)
        assert (doc["msgId"], doc["body"], doc["properties"]["UNIQ_KEY"]) == (
            sent.msg_id,
            "classic",
            uniq,
        )
    doc = ok_json("queryMsgByUniqueKey", "-a", a, "-i", uniq, "-t", "T")
    assert isinstance(doc, dict) and [m["msgId"] for m in doc["messages"]] == [sent.msg_id]
    one_line_error(
        rmqctl("queryMsgById", "-a", a, "-i", uniq[:-1] + "2"),
        f"message {uniq[:-1]}2 not found: ",
    )
