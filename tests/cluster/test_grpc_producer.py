"""The official RocketMQ 5 Python client (rocketmq-python-client) as a producer of every message
type through a broker's gRPC endpoint, plaintext and TLS; our SDK consumer reads what it sent.

One cluster for the module: 3 controllers and broker-a (one replica) with a plaintext and a TLS
gRPC port (a test CA made here with the openssl CLI), a 64 KiB body limit and check-backs after
1 s. The official client runs in processes of its own with HOME at a temp dir (it writes its
logs there), as tests/cluster/test_grpc_official_client.py explains.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.consumer import Consumer
from client.message import ReceivedMessage
from client.producer import Producer as SdkProducer
from tests.cluster.support import create_once_registered
from tests.support.cluster import Cluster
from tests.support.official_client import client_env, run_script
from tests.support.procs import free_port
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcKinds"  # one queue: what the consumer reads is in the order it was stored
FIFO_TOPIC = "GrpcFifo"  # four queues: a message group must keep to one
BAD_TOPIC = "GrpcBad"  # one queue: what bad requests must not store anything in
MAX_BODY = 64 * 1024
CONFIG = f"""
max_message_bytes = {MAX_BODY}
transaction_check_first_ms = 1000
transaction_check_interval_ms = 1000
"""


class GrpcCluster:
    def __init__(self, cluster: Cluster, endpoint: str, tls_endpoint: str, ca: Path, tmp: Path):
        self.cluster = cluster
        self.endpoint = endpoint
        self.tls_endpoint = tls_endpoint
        self.ca = ca
        self.tmp = tmp

    def run(self, script: str, *args: str, tls: bool = False, timeout: float = 60) -> str:
        """Run ``script`` (the official client) in a process of its own; its last stdout line."""
        env = client_env(self.tmp)
        if tls:
            env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(self.ca)
        return run_script(script, self.tmp, *args, env=env, timeout=timeout, logs=self.cluster.logs)


def make_test_ca(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca.pem, server.pem, key)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp, timeout=30)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=rmq test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (tmp / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext",
    )  # fmt: skip
    return tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"


@pytest.fixture(scope="module")
def grpc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcCluster]:
    tmp = tmp_path_factory.mktemp("grpc")
    ca, cert, key = make_test_ca(tmp)
    cluster = Cluster(tmp)
    try:
        cluster.start_controllers()
        port, tls_port = free_port(), free_port()
        cluster.add_group(
            "broker-a",
            1,
            extra=[
                "--grpc-listen", f"127.0.0.1:{port}",
                "--grpc-tls-listen", f"127.0.0.1:{tls_port}",
                "--tls-cert", str(cert),
                "--tls-key", str(key),
            ],
            config=CONFIG,
        )  # fmt: skip
        grpc = GrpcCluster(cluster, f"127.0.0.1:{port}", f"127.0.0.1:{tls_port}", ca, tmp)
        asyncio.run(_create_topics(cluster, {TOPIC: 1, FIFO_TOPIC: 4, BAD_TOPIC: 1}))
        yield grpc
    finally:
        cluster.stop()


async def _create_topics(cluster: Cluster, topics: dict[str, int]) -> None:
    for topic, queues in topics.items():
        await create_once_registered(cluster, topic, queues, f"topic {topic} to be created")


_PRODUCE = """
import json, sys, threading, time
from rocketmq import (ClientConfiguration, Credentials, Message, Producer, TransactionChecker,
                      TransactionResolution)

endpoint, topic, fifo_topic = sys.argv[1:4]
checked = {}
both_checked = threading.Event()

class Checker(TransactionChecker):
    def check(self, message):
        checked[message.message_id] = {
            "topic": message.topic, "body": message.body.decode(), "tag": message.tag,
            "keys": sorted(message.keys), "decide": message.properties.get("decide"),
        }
        decide = message.properties.get("decide")
        if sum(1 for c in checked.values() if c["decide"]) >= 2:
            both_checked.set()
        if decide == "commit":
            return TransactionResolution.COMMIT
        if decide == "rollback":
            return TransactionResolution.ROLLBACK
        # A check that raced the producer's own commit or rollback (a slow machine): no answer.
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED

def message(topic, body, tag, key, **props):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.tag = tag
    m.keys = key
    for k, v in props.items():
        m.add_property(k, v)
    return m

producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10),
                    (topic, fifo_topic), Checker())
producer.startup()
out = {"sent": {}}
try:
    def sent(name, receipt, **extra):
        out["sent"][name] = {"id": receipt.message_id, "offset": receipt.offset, **extra}

    sent("normal", producer.send(message(topic, "normal", "TagN", "kn", color="red")))
    try:  # over the broker's max_message_bytes, which its Settings answer told the client
        producer.send(message(topic, "x" * (int(sys.argv[4]) + 1), "TagX", "kx"))
        out["too_big"] = "sent"
    except Exception as e:
        out["too_big"] = f"{type(e).__name__}: {e}"
    for i in range(6):
        m = message(fifo_topic, f"fifo-{i}", "TagF", f"kf{i}", seq=str(i))
        m.message_group = "order-7"
        sent(f"fifo{i}", producer.send(m))
    due = int(time.time()) + 4
    m = message(topic, "delayed", "TagD", "kd", color="blue")
    m.delivery_timestamp = due
    sent("delayed", producer.send(m), due=due)
    m = message(topic, "recalled", "TagR", "kr")
    m.delivery_timestamp = int(time.time()) + 600
    receipt = producer.send(m)
    sent("recalled", receipt, recalled=producer.recall_message(topic, receipt.recall_handle))
    try:
        producer.recall_message(topic, receipt.recall_handle)
        out["recall_again"] = "OK"
    except Exception as e:
        out["recall_again"] = f"{type(e).__name__}: {e}"
    for name, decide in (("commit", None), ("rollback", None), ("check_commit", "commit"),
                         ("check_rollback", "rollback")):
        tx = producer.begin_transaction()
        props = {"color": "green"} if decide is None else {"decide": decide}
        receipt = producer.send(message(topic, name, "TagT", f"k-{name}", **props), tx)
        sent(name, receipt, transaction_id=receipt.transaction_id)
        if name == "commit":
            tx.commit()
        elif name == "rollback":
            tx.rollback()
    # Stay up until the broker checked both unresolved transactions back over Telemetry.
    out["checked_back"] = both_checked.wait(30)
    out["checked"] = checked
    time.sleep(1)  # the checker's EndTransaction goes out on the client's own thread
finally:
    producer.shutdown()
print(json.dumps(out))
"""


async def test_every_message_type_sent_by_the_official_producer_reads_back_as_sent(
    grpc_cluster: GrpcCluster,
) -> None:
    g = grpc_cluster
    started = time.time()
    out = json.loads(
        await asyncio.to_thread(
            g.run, _PRODUCE, g.endpoint, TOPIC, FIFO_TOPIC, str(MAX_BODY), timeout=90
        )
    )
    sent = out["sent"]
    assert out["too_big"].startswith("IllegalArgumentException"), out["too_big"]
    assert f"max size={MAX_BODY}" in out["too_big"]
    assert out["checked_back"], out
    # The checker saw the unresolved half messages as they were sent.
    checked = out["checked"]
    assert sorted(
        (c["body"], c["topic"], c["tag"], c["keys"], c["decide"])
        for c in (checked[sent["check_commit"]["id"]], checked[sent["check_rollback"]["id"]])
    ) == [
        ("check_commit", TOPIC, "TagT", ["k-check_commit"], "commit"),
        ("check_rollback", TOPIC, "TagT", ["k-check_rollback"], "rollback"),
    ]
    assert all(sent[n]["transaction_id"] for n in ("commit", "rollback", "check_commit"))
    assert sent["recalled"]["recalled"] and "NotFound" in out["recall_again"], out
    # Both check answers reached the master (END_TRANSACTION from a check), so any copy of
    # theirs is in the topic's one queue before a sentinel sent now.
    broker = g.cluster.brokers[0]

    def both_answered() -> bool:
        answers = set()
        for line in broker.log().splitlines():
            if "transaction check answered" in line:
                answers.add(json.loads(line).get("answer"))
        return {"COMMIT", "ROLLBACK"} <= answers

    wait_until(
        both_answered,
        "the master to apply both check answers",
        30,
        on_timeout=g.cluster.logs,
    )
    async with SdkProducer(g.cluster.controller_addresses) as sdk:
        await sdk.send(TOPIC, b"sentinel")

    seen_at: dict[str, float] = {}
    got: dict[str, list[ReceivedMessage]] = {}
    async with Consumer(g.cluster.controller_addresses, "grpc-kinds", TOPIC) as consumer:

        async def read_all() -> bool:
            for m in await consumer.receive(timeout=0.5):
                name = m.body.decode()
                got.setdefault(name, []).append(m)
                seen_at.setdefault(name, time.time())
            return "sentinel" in got and "delayed" in got

        await wait_until_async(read_all, "the topic's messages", 40, on_timeout=g.cluster.logs)
    # Committed once (by the producer or its checker); rolled back or recalled: never.
    assert sorted(got) == ["check_commit", "commit", "delayed", "normal", "sentinel"], got
    assert all(len(v) == 1 for v in got.values()), got
    # Not visible before its time (the delivery timestamp has whole-second precision).
    assert seen_at["delayed"] >= sent["delayed"]["due"] > started
    for name, tag, key, props in (
        ("normal", "TagN", "kn", {"color": "red"}),
        ("delayed", "TagD", "kd", {"color": "blue"}),
        ("commit", "TagT", "k-commit", {"color": "green"}),
        ("check_commit", "TagT", "k-check_commit", {"decide": "commit"}),
    ):
        m = got[name][0]
        assert (m.tags, m.keys, m.properties["UNIQ_KEY"]) == (tag, key, sent[name]["id"]), name
        assert {k: m.properties[k] for k in props} == props, name
    assert got["normal"][0].queue_offset == sent["normal"]["offset"]

    fifo: list[ReceivedMessage] = []
    async with Consumer(g.cluster.controller_addresses, "grpc-fifo", FIFO_TOPIC) as consumer:

        async def read_fifo() -> bool:
            fifo.extend(await consumer.receive(timeout=0.5))
            return len(fifo) >= 6

        await wait_until_async(read_fifo, "the FIFO messages", 30)
    # One queue for the group, in the order sent, with the group on every message.
    assert [m.body for m in fifo] == [f"fifo-{i}".encode() for i in range(6)]
    assert len({m.queue_id for m in fifo}) == 1
    for i, m in enumerate(fifo):
        assert m.properties["__SHARDINGKEY"] == "order-7"
        assert (m.tags, m.keys, m.properties["seq"]) == ("TagF", f"kf{i}", str(i))
        assert m.properties["UNIQ_KEY"] == sent[f"fifo{i}"]["id"]
        assert m.queue_offset == sent[f"fifo{i}"]["offset"]


_TLS_PRODUCE = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic = sys.argv[1:3]
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,),
                    tls_enable=True)
producer.startup()
try:
    m = Message()
    m.topic = topic
    m.body = b"over-tls"
    m.tag = "TagS"
    receipt = producer.send(m)
finally:
    producer.shutdown()
print(json.dumps({"id": receipt.message_id}))
"""


async def test_the_official_producer_sends_over_tls_with_a_certificate_of_the_tests_ca(
    grpc_cluster: GrpcCluster,
) -> None:
    g = grpc_cluster
    out = json.loads(await asyncio.to_thread(g.run, _TLS_PRODUCE, g.tls_endpoint, TOPIC, tls=True))
    found: list[ReceivedMessage] = []
    async with Consumer(g.cluster.controller_addresses, "grpc-tls", TOPIC) as consumer:

        async def read() -> bool:
            found.extend(m for m in await consumer.receive(timeout=0.5) if m.body == b"over-tls")
            return bool(found)

        await wait_until_async(read, "the message sent over TLS", 30)
    assert found[0].properties["UNIQ_KEY"] == out["id"] and found[0].tags == "TagS"


async def test_bad_requests_get_a_clear_status_store_nothing_and_the_broker_keeps_serving(
    grpc_cluster: GrpcCluster,
) -> None:
    import grpc

    from protocol.message import make_msg_id
    from protocol.rocketmq_v2 import definition_pb2 as pb
    from protocol.rocketmq_v2 import service_pb2 as rpc
    from protocol.rocketmq_v2.service_pb2_grpc import MessagingServiceStub

    def message(body: bytes, **sysp: object) -> pb.Message:
        m = pb.Message(topic=pb.Resource(name=BAD_TOPIC), body=body)
        m.system_properties.message_id = "bad-1"
        for name, value in sysp.items():
            setattr(m.system_properties, name, value)
        return m

    async with grpc.aio.insecure_channel(grpc_cluster.endpoint) as channel:
        stub = MessagingServiceStub(channel)

        async def send(m: pb.Message) -> rpc.SendResultEntry:
            answer = await stub.SendMessage(rpc.SendMessageRequest(messages=[m]), timeout=10)
            assert answer.status.code == answer.entries[0].status.code
            return answer.entries[0]

        # A body over max_message_bytes: refused with the limit in the message.
        big = await send(message(b"x" * (MAX_BODY + 1)))
        assert big.status.code == pb.MESSAGE_BODY_TOO_LARGE, big
        assert f"{MAX_BODY + 1} bytes exceeds" in big.status.message
        # Far over it: grpcio refuses the request itself.
        with pytest.raises(grpc.aio.AioRpcError) as huge:
            await send(message(b"x" * (MAX_BODY + 2 * 1024 * 1024)))
        assert huge.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        conflict = await send(message(b"x", message_type=pb.TRANSACTION, message_group="g"))
        assert conflict.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, conflict
        # Not protobuf at all, and a method the service does not have.
        garbage = channel.unary_unary("/apache.rocketmq.v2.MessagingService/EndTransaction")
        with pytest.raises(grpc.aio.AioRpcError) as bad_bytes:
            await garbage(b"\xff\xff\xff", timeout=10)
        assert bad_bytes.value.code() == grpc.StatusCode.UNKNOWN
        assert "Error parsing message" in str(bad_bytes.value.details())
        unknown = channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchMethod")
        with pytest.raises(grpc.aio.AioRpcError) as no_method:
            await unknown(b"", timeout=10)
        assert no_method.value.code() == grpc.StatusCode.UNIMPLEMENTED

        # EndTransaction of no transaction, or with a malformed id; recall of garbage.
        def end(txn_id: str) -> rpc.EndTransactionRequest:
            return rpc.EndTransactionRequest(
                topic=pb.Resource(name=BAD_TOPIC),
                message_id="bad-1",
                transaction_id=txn_id,
                resolution=pb.COMMIT,
                source=pb.SOURCE_CLIENT,
            )

        nothing = await stub.EndTransaction(end(make_msg_id("127.0.0.1:1", 123456)), timeout=10)
        assert nothing.status.code == pb.NOT_FOUND, nothing
        assert "no transaction" in nothing.status.message
        malformed = await stub.EndTransaction(end("zz"), timeout=10)
        assert malformed.status.code == pb.INVALID_TRANSACTION_ID, malformed
        recall = await stub.RecallMessage(
            rpc.RecallMessageRequest(topic=pb.Resource(name=BAD_TOPIC), recall_handle="!!"),
            timeout=10,
        )
        assert recall.status.code == pb.BAD_REQUEST and "recall handle" in recall.status.message

        # A topic in a namespace (not served here) is refused, not sent to the plain topic.
        spaced = message(b"x")
        spaced.topic.resource_namespace = "prod"
        in_namespace = await send(spaced)
        assert in_namespace.status.code == pb.UNSUPPORTED, in_namespace
        assert "namespace 'prod'" in in_namespace.status.message
        spaced_route = await stub.QueryRoute(
            rpc.QueryRouteRequest(topic=pb.Resource(name=BAD_TOPIC, resource_namespace="prod")),
            timeout=10,
        )
        assert spaced_route.status.code == pb.UNSUPPORTED, spaced_route

        # Still serving, and none of it was stored: a good message is the queue's first.
        good = await send(message(b"good"))
        assert (good.status.code, good.offset) == (pb.OK, 0), good
        route = await stub.QueryRoute(
            rpc.QueryRouteRequest(topic=pb.Resource(name=BAD_TOPIC)), timeout=10
        )
        assert route.status.code == pb.OK
    assert all(b.alive() for b in grpc_cluster.cluster.brokers)
