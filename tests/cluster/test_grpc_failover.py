"""kill -9 of the master while the official RocketMQ 5 Python client produces through the gRPC
endpoints: its sends resume on the new master without a new route (the route lists every broker
of the group; a slave's endpoint hands writes to its master), not one fails (the slave's endpoint
waits for the next master, docs/protocol.md "Through a failover"; before, a send could fail with
INTERNAL_ERROR "master unavailable: connection refused") and every acknowledged message is in
the topic, read with our SDK. A send the old master stored but could not answer is retried
by the client with the same message id and may be in the topic twice (at least once: the
official clients' duplicate window is off by default); the test keeps every copy it reads.

The official client runs in a process of its own with HOME at a temp dir, as
tests/cluster/test_grpc_official_client.py explains; it prints one line per acknowledged send.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from client import Consumer
from client.bootstrap import Bootstrap
from tests.cluster.support import (
    add_grpc_group,
    create_topic,
    full_sync_state_set,
    new_master,
    node_at,
)
from tests.support.cluster import Cluster
from tests.support.official_client import StreamingClient
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcFailover"

_PRODUCE = """
import json, os, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic, stop = sys.argv[1:4]
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=3), (topic,))
producer.startup()
i = 0
try:
    while not os.path.exists(stop):
        m = Message()
        m.topic = topic
        m.body = f"m-{i}".encode()
        try:
            receipt = producer.send(m)
        except Exception as e:  # the application retries what was not acknowledged
            print(f"send {i} failed: {e}", file=sys.stderr, flush=True)
            time.sleep(0.2)
            continue
        print(json.dumps({"i": i, "id": receipt.message_id}), flush=True)
        i += 1
finally:
    producer.shutdown()
"""


async def test_sends_resume_on_the_new_master_and_nothing_acknowledged_is_lost(
    cluster: Cluster, tmp_path: Path
) -> None:
    ports = add_grpc_group(cluster)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        old = (await full_sync_state_set(boot, cluster))["masterAddress"]
        await create_topic(boot, old, TOPIC, 2)
        # The access point is a slave's endpoint: the route names the master's and the others.
        slave = next(i for i, b in enumerate(cluster.brokers) if b.address != old)
        with StreamingClient(_PRODUCE, tmp_path, f"127.0.0.1:{ports[slave]}", TOPIC) as producer:
            acked = producer.lines

            def logs() -> str:
                return producer.stderr_tail(20) + cluster.logs()

            # The client refreshes its routes 10 s after it starts, then every 30 s (its log
            # says each time): kill after the first refresh, so the sends must resume through
            # the endpoints of the route it has, not a fresh one.
            client_log = tmp_path / "logs" / "rocketmq_python" / "rocketmq_client.log"

            def refreshed() -> bool:
                text = client_log.read_text() if client_log.exists() else ""
                return text.count(f"update topic:{TOPIC} route, route info") >= 2

            wait_until(lambda: len(acked) >= 30, "30 sends before the kill", 30, on_timeout=logs)
            wait_until(refreshed, "the client's first route refresh", 30, on_timeout=logs)
            node_at(cluster, old).kill9()
            new = (await new_master(boot, cluster, old))["masterAddress"]
            elected = len(acked)  # acknowledged before the new master was elected: by the old
            wait_until(
                lambda: len(acked) >= elected + 30,
                "30 sends acknowledged after the kill",
                20,
                on_timeout=logs,
            )
        assert producer.returncode == 0, producer.stderr_tail()
    finally:
        boot.close()
    # No send failed: a slave's endpoint waits for the next master rather than answer at once.
    failed = [line for line in producer.errors if line.startswith("send ")]
    assert failed == [], failed[:10]

    # Every copy of each message, by its id: a send the old master stored (and replicated)
    # but could not answer before the kill is retried by the client with the same id and
    # stored again by the new master. Without a duplicate window (off by default for the
    # official clients, docs/idempotence.md) both copies are in the topic, read in either
    # order; the acknowledgement is the new master's.
    sent = {str(a["id"]): int(str(a["i"])) for a in acked}
    got: dict[str, list[tuple[bytes, str]]] = {}
    seen: set[tuple[int, int]] = set()
    async with Consumer(cluster.controller_addresses, "grpc-failover", TOPIC) as consumer:

        async def all_read() -> bool:
            for m in await consumer.receive(timeout=0.5):
                if (m.queue_id, m.queue_offset) not in seen:
                    seen.add((m.queue_id, m.queue_offset))
                    got.setdefault(m.properties["UNIQ_KEY"], []).append(
                        (m.body, m.record.store_host)
                    )
            return set(sent) <= set(got)

        await wait_until_async(all_read, "every acknowledged message", 40, on_timeout=cluster.logs)
    for msg_id, i in sent.items():
        copies = got[msg_id]
        assert all(body == f"m-{i}".encode() for body, _ in copies), (i, copies)
        stored_by = [host for _, host in copies]
        if i < elected:
            assert set(stored_by) <= {old, new}, (i, elected, stored_by)
        else:
            # acknowledged after the election: the new master stored the copy it answered for
            assert new in stored_by, (i, elected, stored_by)
            assert set(stored_by) <= {old, new}, (i, elected, stored_by)
