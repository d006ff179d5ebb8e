"""The official RocketMQ 5 Node.js client (rocketmq-client-nodejs, from npm) produces and
consumes through a broker's gRPC endpoint: its Producer sends, its SimpleConsumer (which starts
only once Telemetry answered its settings) receives with a tag filter, changes an invisible
duration and acks; our SDK reads what it sent, field by field.

The client is installed with ``npm ci`` from tests/nodejs (package.json and its lockfile) into a
cache directory named by the lockfile's hash, once per machine. Without node or npm the test is
skipped, except under CI=true, where that is a failure (.ci/run installs them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from client.admin import Admin
from client.simple_consumer import PopMessage, SimpleConsumer
from tests.support.official_client import client_env, npm_modules, run_to_end
from tests.support.procs import ROOT, GrpcBrokerProc, module_broker
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcNodeTopic"
PACKAGE = ROOT / "tests" / "nodejs"


broker = module_broker("grpc-node", GrpcBrokerProc)


async def test_nodejs_producer_and_simple_consumer(broker: GrpcBrokerProc, tmp_path: Path) -> None:
    modules = npm_modules(PACKAGE, "the official Node.js client")
    async with Admin(broker.address) as admin:
        await admin.create_topic(TOPIC, 2)
    endpoint = f"127.0.0.1:{broker.grpc_port}"
    result = await run_to_end(
        [
            str(shutil.which("node")),
            str(PACKAGE / "simple_consumer.js"),
            endpoint,
            TOPIC,
            "node-simple",
        ],
        tmp_path,
        env=client_env(tmp_path, PATH=os.environ.get("PATH", ""), NODE_PATH=str(modules)),
    )

    sent = {s["id"]: s for s in result["sent"]}
    assert len(sent) == 4
    received = result["received"]
    assert sorted(m["body"] for m in received) == ["node-0", "node-2"], result  # NodeA only
    for m in received:
        i = int(m["body"].rsplit("-", 1)[1])
        assert m["id"] in sent
        assert m["topic"] == TOPIC and m["tag"] == "NodeA"
        assert m["keys"] == [f"node-key-{i}"]
        assert m["properties"] == {"from": "nodejs", "n": str(i)}
        assert m["attempt"] == 1 and m["corrupted"] is False and m["bornHost"]
    assert result["changed"] is True  # the change of invisible duration gave a new handle

    # Our SDK reads what the Node.js producer sent, every field.
    got: list[PopMessage] = []
    async with SimpleConsumer(broker.address, "node-readers", TOPIC) as ours:

        async def all_read() -> bool:
            got.extend(await ours.receive(16, invisible_duration=30, wait=1))
            return len(got) >= 4

        await wait_until_async(all_read, "our consumer to read the 4 messages", 30)
    for m in got:
        i = int(m.body.decode().rsplit("-", 1)[1])
        assert m.properties["UNIQ_KEY"] in sent
        assert m.queue_offset == sent[m.properties["UNIQ_KEY"]]["offset"]
        assert m.tags == ("NodeA" if i % 2 == 0 else "NodeB")
        assert m.keys == f"node-key-{i}"
        assert m.properties["from"] == "nodejs" and m.properties["n"] == str(i)
