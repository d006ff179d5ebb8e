"""RocketMQ's ACL 1.0 signature on the broker's classic door, against real processes: a
broker group with authentication on, users created on the controllers, and raw classic frames
signed as RocketMQ's AclClientRPCHook signs them (AccessKey = our username, HMAC-SHA1 with the
user's secret). A signed send with pub on its topic is stored; a bad signature, an unknown
access key, a missing signature and a missing permission each answer NO_PERMISSION (16) with
the reason, and store nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Credentials
from protocol.acl import make_rule
from protocol.codes import ControllerCode
from protocol.codes import RequestCode as OurCode
from protocol.rocketmq_remoting.acl import sign
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, SerializeType
from protocol.rocketmq_remoting.headers import SendMessageHeader
from protocol.rocketmq_remoting.properties import encode_properties
from remoting.errors import ResponseError
from tests.cluster.secured import ROOT, admin_call, create_root, secured_cluster
from tests.support.alions import SCRIPT, alions_env, node
from tests.support.classic import Raw, pull_header
from tests.support.cluster import BrokerNode, Cluster
from tests.support.official_client import run_to_end
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

APP = Credentials("classic-app", "classic-Secret-4242")
"""pub on Topic:AclA only."""
NODE_APP = Credentials("alions-app", "alions-Secret-4242")
"""pub and sub on Topic:AclNode, sub on Group:alions-acl."""


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, BrokerNode]]:
    cluster, key, settings = secured_cluster(tmp_path_factory.mktemp("classic-acl"))
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        (broker,) = cluster.add_group(
            "broker-a", replicas=1, config=settings + "auth_refresh_interval_ms = 1000\n"
        )

        async def setup() -> None:
            addresses = cluster.controller_addresses
            await admin_call(addresses, ControllerCode.AUTH_CREATE_USER,
                             {"username": APP.access_key}, {"secret": APP.secret_key})  # fmt: skip
            rule = make_rule("Topic:AclA", ["pub"], "allow").to_doc()
            await admin_call(addresses, ControllerCode.AUTH_CREATE_ACL,
                             {"username": APP.access_key}, {"rules": [rule]})  # fmt: skip
            await admin_call(addresses, ControllerCode.AUTH_CREATE_USER,
                             {"username": NODE_APP.access_key},
                             {"secret": NODE_APP.secret_key})  # fmt: skip
            rules = [
                make_rule("Topic:AclNode", ["pub", "sub"], "allow").to_doc(),
                make_rule("Group:alions-acl", ["sub"], "allow").to_doc(),
            ]
            await admin_call(addresses, ControllerCode.AUTH_CREATE_ACL,
                             {"username": NODE_APP.access_key}, {"rules": rules})  # fmt: skip
            for topic in ("AclA", "AclB", "AclNode"):
                header = {"topic": topic, "queues": 1, "brokerName": "broker-a"}

                async def created(h: dict[str, str | int] = header) -> bool:
                    try:  # once the broker registered (its group has a master)
                        await admin_call(addresses, OurCode.UPDATE_AND_CREATE_TOPIC, h)
                    except ResponseError:
                        return False
                    return True

                await wait_until_async(
                    created, f"topic {topic} created", 60, on_timeout=cluster.logs
                )

        asyncio.run(setup())
        yield cluster, broker
    finally:
        cluster.stop()


def signed(fields: dict[str, str], body: bytes, creds: Credentials) -> dict[str, str]:
    out = {**fields, "AccessKey": creds.access_key}
    out["Signature"] = sign(out, body, creds.secret_key)
    return out


def send_fields(topic: str) -> dict[str, str]:
    return SendMessageHeader(
        producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=0, born_timestamp=1_700_000_000_000, flag=0,
        properties=encode_properties({"TAGS": "t"}),
    ).ext_fields(short_names=True)  # fmt: skip


async def max_offset(raw: Raw, topic: str) -> int:
    """The topic's queue 0 end offset, asked as the super user."""
    fields = {"topic": topic, "queueId": "0"}
    answer = await raw.call(RequestCode.GET_MAX_OFFSET, signed(fields, b"", ROOT))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return int(answer.ext_fields["offset"])


def refused(answer: RemotingCommand, says: str) -> None:
    assert answer.code == ResponseCode.NO_PERMISSION, (answer.code, answer.remark)
    assert says in (answer.remark or ""), answer.remark


async def test_signed_requests_are_checked_against_our_users(
    secured: tuple[Cluster, BrokerNode],
) -> None:
    _, broker = secured
    raw = await Raw.open(broker.port)
    try:
        send = RequestCode.SEND_MESSAGE_V2

        async def app_known() -> bool:  # the broker's users follow the controllers'
            answer = await raw.call(send, signed(send_fields("AclA"), b"first", APP), b"first")
            return answer.code == ResponseCode.SUCCESS

        await wait_until_async(app_known, "the broker to know user classic-app", 30)
        stored_a = await max_offset(raw, "AclA")
        assert stored_a >= 1

        # A signed send with pub on its topic is stored, in either serialize type.
        for kind in (SerializeType.JSON, SerializeType.ROCKETMQ):
            fields = signed(send_fields("AclA"), b"hello", APP)
            answer = await raw.call(send, fields, b"hello", kind=kind)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert await max_offset(raw, "AclA") == stored_a + 2

        # A wrong secret, a body changed after signing, a field changed after signing.
        wrong = Credentials(APP.access_key, "not-the-secret")
        refused(await raw.call(send, signed(send_fields("AclA"), b"x", wrong), b"x"),
                "does not match")  # fmt: skip
        refused(await raw.call(send, signed(send_fields("AclA"), b"x", APP), b"y"),
                "does not match")  # fmt: skip
        tampered = {**signed(send_fields("AclA"), b"x", APP), "b": "AclB"}
        refused(await raw.call(send, tampered, b"x"), "does not match")
        # An unknown access key; no signature at all.
        stranger = Credentials("nobody", "nobody-Secret-42")
        refused(await raw.call(send, signed(send_fields("AclA"), b"x", stranger), b"x"),
                "unknown access key 'nobody'")  # fmt: skip
        refused(await raw.call(send, send_fields("AclA"), b"x"), "no RocketMQ ACL signature")
        # Signed, but no pub on AclB; no sub on AclA for a pull.
        refused(await raw.call(send, signed(send_fields("AclB"), b"x", APP), b"x"),
                "no rule of classic-app allows pub on Topic:AclB")  # fmt: skip
        pull = pull_header("AclA", 0, consumerGroup="g1", maxMsgNums="1")
        refused(await raw.call(RequestCode.PULL_MESSAGE, signed(pull, b"", APP)),
                "allows sub on Topic:AclA")  # fmt: skip

        # None of the refused sends stored anything.
        assert await max_offset(raw, "AclA") == stored_a + 2
        assert await max_offset(raw, "AclB") == 0
    finally:
        raw.close()


async def test_the_nameserver_door_checks_the_signature_and_our_route_rule(
    secured: tuple[Cluster, BrokerNode],
) -> None:
    cluster, _ = secured
    raw = await Raw.open(cluster.controllers[0].port)
    try:
        route = RequestCode.GET_ROUTEINFO_BY_TOPIC

        async def routed() -> bool:  # a follower answers once it applied the user
            answer = await raw.call(route, signed({"topic": "AclA"}, b"", APP))
            return answer.code == ResponseCode.SUCCESS

        await wait_until_async(routed, "a signed route query for AclA", 30)
        # pub on AclA suffices for its route; nothing on AclB refuses it
        refused(await raw.call(route, signed({"topic": "AclB"}, b"", APP)),
                "no rule of classic-app allows pub on Topic:AclB")  # fmt: skip
        refused(await raw.call(route, {"topic": "AclA"}), "no RocketMQ ACL signature")
        wrong = Credentials(APP.access_key, "not-the-secret")
        refused(await raw.call(route, signed({"topic": "AclA"}, b"", wrong)), "does not match")
        # the cluster's brokers: any user; the topic list: a super user
        cluster_info = await raw.call(RequestCode.GET_BROKER_CLUSTER_INFO, signed({}, b"", APP))
        assert cluster_info.code == ResponseCode.SUCCESS, cluster_info.remark
        topics = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        refused(await raw.call(topics, signed({}, b"", APP)), "needs a super user")
        listed = await raw.call(topics, signed({}, b"", ROOT))
        assert listed.code == ResponseCode.SUCCESS, listed.remark
    finally:
        raw.close()


async def test_alions_signs_with_an_access_key_and_is_refused_without(
    secured: tuple[Cluster, BrokerNode], tmp_path: Path
) -> None:
    cluster, broker = secured
    name_srv = cluster.controllers[0].address
    raw = await Raw.open(broker.port)
    try:

        async def known() -> bool:  # the broker's users follow the controllers'
            fields = signed({"topic": "AclNode", "queueId": "0"}, b"", NODE_APP)
            answer = await raw.call(RequestCode.GET_MAX_OFFSET, fields)
            return answer.code == ResponseCode.SUCCESS

        await wait_until_async(known, "the broker to know user alions-app", 30)
    finally:
        raw.close()
    env = alions_env(tmp_path)
    signed_env = {
        **env,
        "ALIONS_ACCESS_KEY": NODE_APP.access_key,
        "ALIONS_SECRET_KEY": NODE_APP.secret_key,
    }
    argv = [node(), str(SCRIPT)]
    produced = await run_to_end(
        [*argv, "produce", name_srv, "AclNode", "4"], tmp_path, env=signed_env, timeout=120
    )
    assert len(produced["sent"]) == 4
    consumed = await run_to_end(
        [*argv, "consume", name_srv, "AclNode", "alions-acl", "4"],
        tmp_path,
        env=signed_env,
        timeout=120,
    )
    bodies = sorted(m["body"] for m in consumed["received"])
    assert bodies == [f"alions-{i}" for i in range(4)]

    # Without keys its route query is refused (NO_PERMISSION) and the send fails.
    proc = await asyncio.create_subprocess_exec(
        *argv, "produce", name_srv, "AclNode", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode != 0
    assert "ACL signature" in err.decode(), err.decode()[-2000:]
