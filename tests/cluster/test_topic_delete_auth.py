"""deleteTopic and deleteSubGroup with authentication on (issue 28 item 2), real processes: a
user without ``delete`` on the topic or group is refused NO_PERMISSION with the reason and
nothing changes; with it, the delete goes through (the controllers' pushes to the brokers sign
as the cluster)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator

import msgpack
import pytest

from client import Credentials
from protocol.acl import make_rule
from protocol.codes import ControllerCode, RequestCode, ResponseCode
from protocol.remoting import Scalar
from remoting.client import RemotingClient, signer_for
from tests.cluster.secured import ROOT, admin_call, create_root, secured_cluster
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

APP = Credentials("app", "app-Secret-4242")
"""pub, sub, create and get on Topic:A and Group:g1, no delete."""
OPS = Credentials("ops", "ops-Secret-4242")
"""delete on Topic:A and Group:g1."""


@pytest.fixture
def secured(tmp_path: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster, key, settings = secured_cluster(tmp_path)  # type: ignore[arg-type]
    try:
        cluster.start_controllers()
        create_root(cluster, key)
        cluster.add_group(
            "broker-a", replicas=1, config=settings + "auth_refresh_interval_ms = 1000\n"
        )

        async def setup() -> None:
            for creds, actions in ((APP, "pub,sub,create,get"), (OPS, "delete")):
                await admin_call(
                    cluster.controller_addresses,
                    ControllerCode.AUTH_CREATE_USER,
                    {"username": creds.access_key},
                    {"secret": creds.secret_key},
                )
                rules = [
                    make_rule(r, actions.split(","), "allow").to_doc()
                    for r in ("Topic:A", "Group:g1")
                ]
                await admin_call(
                    cluster.controller_addresses,
                    ControllerCode.AUTH_CREATE_ACL,
                    {"username": creds.access_key},
                    {"rules": rules},
                )

        asyncio.run(setup())

        def topic_created() -> bool:
            header: dict[str, Scalar] = {"topic": "A", "queues": 1, "brokerName": "broker-a"}
            try:
                asyncio.run(
                    admin_call(
                        cluster.controller_addresses, RequestCode.UPDATE_AND_CREATE_TOPIC, header
                    )
                )
            except Exception:  # no master yet
                return False
            return True

        wait_until(topic_created, "topic A created", 60, on_timeout=cluster.logs)
        yield cluster
    finally:
        cluster.stop()


def ctl(cluster: Cluster, creds: Credentials, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["RMQ_ACCESS_KEY"] = creds.access_key
    env["RMQ_SECRET_KEY"] = creds.secret_key
    return rmqctl("-a", cluster.controller_addresses, "--json", *args, env=env)


async def topic_on_broker(cluster: Cluster, topic: str) -> bool:
    conn = await RemotingClient.connect(cluster.brokers[0].address, signer=signer_for(ROOT))
    try:
        resp = await conn.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}, None, timeout=5.0)
    finally:
        conn.close()
    assert resp.code == ResponseCode.SUCCESS, resp.header
    return topic in msgpack.unpackb(resp.body or b"\x80")


def test_a_delete_without_the_permission_is_refused_and_changes_nothing(
    secured: Cluster,
) -> None:
    cluster = secured
    # The controllers push the topic to the broker after they committed it.
    wait_until(lambda: asyncio.run(topic_on_broker(cluster, "A")), "topic A on the broker", 20)
    for args in (("deleteTopic", "-t", "A", "--force"), ("deleteSubGroup", "-g", "g1")):
        done = ctl(cluster, APP, *args)
        assert done.returncode == 1 and done.stdout == "", done
        line = done.stderr.strip()
        assert "\n" not in line and "denied" in line and "delete" in line, line
    assert asyncio.run(topic_on_broker(cluster, "A"))  # nothing changed
    # A direct request to the broker is refused alike.

    async def direct() -> None:
        conn = await RemotingClient.connect(cluster.brokers[0].address, signer=signer_for(APP))
        try:
            resp = await conn.request(
                RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "A", "force": True}, None, 5.0
            )
        finally:
            conn.close()
        assert resp.code == ResponseCode.NO_PERMISSION, resp.header
        assert "denied" in str(resp.header.get("remark"))

    async def broker_knows_app() -> bool:
        conn = await RemotingClient.connect(cluster.brokers[0].address, signer=signer_for(APP))
        try:
            resp = await conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "A"}, None, 5.0)
        finally:
            conn.close()
        return resp.code == ResponseCode.SUCCESS

    asyncio.run(wait_until_async(broker_knows_app, "the broker to know user app", 20))
    asyncio.run(direct())
    assert asyncio.run(topic_on_broker(cluster, "A"))
    # With delete on the topic, the same command deletes it everywhere.
    done = ctl(cluster, OPS, "deleteTopic", "-t", "A", "--force")
    assert done.returncode == 0, done.stderr
    assert not asyncio.run(topic_on_broker(cluster, "A"))
