"""The console's delete of a topic and of a consumer group while a replica of the broker group is
down (frozen: its process holds its port, answers nothing, and stopped heart-beating), against
real processes: three controllers, broker-a of two replicas, rmq-console (no browser).

The controllers asked that replica all the same and waited out their request timeout (3 s per
step; a frozen master: the dry run's and the delete's), and the console called the outcome a
failure: 502, "... failed: ... still on broker-a (ADDR)". A replica the controllers do not hold
alive is now not asked (its outcome says so at once), and the console answers with what was
deleted where and which replica still has it (docs/console.md)."""

from __future__ import annotations

import asyncio
import html
import re
import signal
import urllib.request
from pathlib import Path

import pytest

from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetUpdate
from remoting.client import RemotingClient
from rmqctl.controller import sync_state
from tests.console.browser import post_form
from tests.console.test_console_not_found import console_for, error_of
from tests.support.cluster import STEADY_MASTER, Cluster
from tests.support.messages import create_once_registered
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def csrf_cookie(base: str) -> tuple[str, str]:
    """A CSRF token the console gave, and the Cookie header that carries it."""
    with urllib.request.urlopen(f"{base}/topics", timeout=30) as answer:
        cookie = answer.headers["Set-Cookie"].split(";")[0]
    return cookie.partition("=")[2], cookie


def notice_of(page: str) -> str:
    found = re.search(r'<p class="notice" id="notice">(.*?)</p>', page, re.S)
    return html.unescape(found.group(1)) if found else ""


async def commit_offset(address: str, group: str, topic: str) -> None:
    conn = await RemotingClient.connect(address)
    try:
        ask = ConsumerOffsetUpdate(group=group, topic=topic, queue_id=0, offset=0)
        resp = await conn.request(ask.code, *ask.encode(), 30)
        assert resp.code == ResponseCode.SUCCESS, resp
    finally:
        conn.close()


def test_a_delete_with_a_replica_down_says_where_it_was_deleted_and_where_not(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path)
    console = None
    try:
        cluster.start_controllers()
        brokers = cluster.add_group("broker-a", 2, config=STEADY_MASTER)
        asyncio.run(create_once_registered(cluster, "Doomed", 2, "topic Doomed on broker-a"))

        def both_in_sync() -> bool:
            doc = asyncio.run(sync_state(cluster.controller_addresses, "broker-a"))
            return bool(doc.get("masterAddress")) and len(doc.get("syncStateSet") or ()) == 2

        wait_until(both_in_sync, "broker-a's two replicas in sync", 60, on_timeout=cluster.logs)
        doc = asyncio.run(sync_state(cluster.controller_addresses, "broker-a"))
        master = next(b for b in brokers if b.address == doc["masterAddress"])
        slave = next(b for b in brokers if b is not master)
        asyncio.run(commit_offset(master.address, "doomed-group", "Doomed"))
        # The slave has the group too (the offsets copied every second).
        offsets = slave.data_dir / "config" / "consumerOffset.json"
        wait_until(
            lambda: offsets.exists() and b"doomed-group" in offsets.read_bytes(),
            "the slave to copy the group's offset",
            30,
        )
        console, base = console_for(tmp_path, cluster.controller_addresses, 10.0)

        slave.signal(signal.SIGSTOP)

        def slave_not_alive() -> bool:
            doc = asyncio.run(sync_state(cluster.controller_addresses, "broker-a"))
            return any(
                r["address"] == slave.address and not r["alive"] for r in doc.get("replicas", ())
            )

        wait_until(slave_not_alive, "the controllers to hold the frozen slave dead", 60)
        token, cookie = csrf_cookie(base)
        # The group first: the topic's delete takes the group's offsets on it along.
        status, page = post_form(f"{base}/groups/doomed-group/delete", {"csrf": token}, cookie)
        assert status == 200, (status, error_of(page) or page[-1500:])
        said = notice_of(page)
        assert said.startswith(
            f"consumer group doomed-group deleted from broker-a {master.address}; "
            f"NOT from broker-a {slave.address} (not asked: not alive for the controllers"
        ), said

        status, page = post_form(
            f"{base}/topics/delete", {"csrf": token, "topic": "Doomed"}, cookie
        )
        # The old code: 502, "delete topic Doomed failed: topic Doomed is deleted from the
        # controllers but still on broker-a (ADDR): ...", after the 3 s push timeout.
        assert status == 200, (status, error_of(page) or page[-1500:])
        said = notice_of(page)
        assert said.startswith(
            f"topic Doomed deleted from the controllers, broker-a {master.address}; "
            f"NOT from broker-a {slave.address} (not asked: not alive for the controllers"
        ), said
        assert said.endswith("delete it again once they are back"), said
        assert "Traceback" not in console.log()
    finally:
        if console is not None:
            console.stop()
        cluster.thaw_and_stop()
