"""kill -9 of the master while the official RocketMQ 5 Python client's SimpleConsumer receives
and acks through the gRPC endpoints: consumption resumes on the new master (the route lists
every broker of the group; a slave's endpoint hands the POP requests to its master), every
message is received, and no message whose ack was answered OK is delivered again (POP state is
in the replicated revive log, docs/pop.md).

The official client runs in a process of its own with HOME at a temp dir; it prints one line
per message received and per ack answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from client import Producer
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
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcConsumeFailover"

_CONSUME = """
import json, os, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.v5.exception import BadRequestException

endpoint, topic, stop = sys.argv[1:4]
consumer = SimpleConsumer(
    ClientConfiguration(endpoint, Credentials(), request_timeout=3),
    "grpc-failover-readers",
    {topic: FilterExpression()},
    await_duration=1,
)
consumer.startup()

def say(**kw):
    print(json.dumps(kw), flush=True)

try:
    while not os.path.exists(stop):
        try:
            messages = consumer.receive(16, 5)
        except Exception as e:  # the application receives again
            print(f"receive failed: {e}", file=sys.stderr, flush=True)
            time.sleep(0.2)
            continue
        for m in messages:
            say(recv=m.message_id, body=m.body.decode(), attempt=m.delivery_attempt)
            time.sleep(0.02)  # some work: a batch is in flight when the master dies
            for _ in range(30):
                try:
                    consumer.ack(m)
                    say(ack=m.message_id)
                    break
                except BadRequestException as e:  # no longer in flight: it comes back
                    say(lost=m.message_id, why=str(e)[:200])
                    break
                except Exception as e:
                    print(f"ack failed: {e}", file=sys.stderr, flush=True)
                    time.sleep(0.3)
finally:
    consumer.shutdown()
"""


async def test_consumption_resumes_on_the_new_master_and_no_acked_message_comes_back(
    cluster: Cluster, tmp_path: Path
) -> None:
    ports = add_grpc_group(cluster)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    sent: dict[str, str] = {}
    try:
        old = (await full_sync_state_set(boot, cluster))["masterAddress"]
        await create_topic(boot, old, TOPIC, 2)
        async with Producer(cluster.controller_addresses) as producer:
            for i in range(300):
                sent[(await producer.send(TOPIC, f"before-{i}".encode())).msg_id] = f"before-{i}"
        master = next(i for i, b in enumerate(cluster.brokers) if b.address == old)
        with StreamingClient(_CONSUME, tmp_path, f"127.0.0.1:{ports[master]}", TOPIC) as consumer:
            lines = consumer.lines

            def logs() -> str:
                return consumer.stderr_tail(20) + cluster.logs()

            def acked() -> set[str]:
                return {str(x["ack"]) for x in list(lines) if "ack" in x}

            wait_until(lambda: len(acked()) >= 30, "30 acks before the kill", 40, on_timeout=logs)
            node_at(cluster, old).kill9()
            await new_master(boot, cluster, old)
            async with Producer(cluster.controller_addresses) as producer:
                for i in range(50):
                    msg_id = (await producer.send(TOPIC, f"after-{i}".encode())).msg_id
                    sent[msg_id] = f"after-{i}"
            wait_until(
                lambda: set(sent) <= acked(),
                "every message acked once",
                60,
                on_timeout=lambda: f"{len(set(sent) - acked())} not acked\n{logs()}",
            )
        assert consumer.returncode == 0, consumer.stderr_tail()
    finally:
        boot.close()

    done: set[str] = set()
    for line in lines:
        if "recv" in line:
            msg_id = str(line["recv"])
            assert msg_id not in done, f"{msg_id} delivered again after its ack was answered OK"
            assert line["body"] == sent[msg_id]
        elif "ack" in line:
            done.add(str(line["ack"]))
    assert done == set(sent)
