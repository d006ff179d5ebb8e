"""The user and ACL requests over the wire against in-process controllers: malformed requests
get a clear code and store nothing; a controller without an auth key refuses secrets; a
follower redirects writes."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from protocol.codes import ControllerCode as CC
from protocol.codes import ResponseCode as RC
from remoting.client import RemotingClient
from tests.controller.support import ServiceCluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ServiceCluster]:
    key = tmp_path / "auth.key"
    key.write_bytes(os.urandom(24).hex().encode())
    key.chmod(0o600)
    async with ServiceCluster(tmp_path, auth_key_file=str(key)) as c:
        yield c


def pack(doc: Any) -> bytes:
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return packed


async def test_malformed_requests_are_refused_and_store_nothing(cluster: ServiceCluster) -> None:
    leader = await cluster.leader()
    conn = await RemotingClient.connect(cluster.address(leader.cfg.id))
    try:

        async def code(req: int, header: dict[str, Any], body: bytes | None = None) -> int:
            resp = await conn.request(req, header, body)
            return resp.code

        user = {"username": "alice"}
        assert (
            await code(CC.AUTH_CREATE_USER, user, b"\xc1garbage") == RC.CONTROLLER_INVALID_REQUEST
        )
        assert await code(CC.AUTH_CREATE_USER, user, pack({"secret": 5})) == (
            RC.CONTROLLER_INVALID_REQUEST
        )
        assert await code(CC.AUTH_CREATE_USER, {**user, "userType": "root"},
                          pack({"secret": "long-enough"})) == RC.CONTROLLER_INVALID_REQUEST  # fmt: skip
        assert await code(CC.AUTH_CREATE_USER, {"username": "a b"},
                          pack({"secret": "long-enough"})) == RC.CONTROLLER_INVALID_REQUEST  # fmt: skip
        assert await code(CC.AUTH_CREATE_USER, {}, pack({"secret": "long-enough"})) != RC.SUCCESS
        assert await code(CC.AUTH_CREATE_USER, user, pack({"secret": "long-enough"})) == RC.SUCCESS
        for body in (
            pack({"rules": "Topic:a"}),
            pack({"rules": []}),
            pack({"rules": [{"resource": "Topic:a", "actions": ["pub"], "decision": "allow",
                             "sources": ["10.0.0.0/33"]}]}),
            pack({"rules": [{"resource": "Topic:a", "actions": "pub", "decision": "allow"}]}),
            pack({"rules": [{"resource": "Topic:a", "actions": ["pub"], "decision": "allow"}] * 2}),
            pack([1, 2]),
        ):  # fmt: skip
            assert await code(CC.AUTH_CREATE_ACL, user, body) == RC.CONTROLLER_INVALID_REQUEST
        assert await code(CC.AUTH_DELETE_ACL, user, pack({"resources": ["Topic"]})) == (
            RC.CONTROLLER_INVALID_REQUEST
        )
        resp = await conn.request(CC.AUTH_LIST_ACL, {})
        assert resp.code == RC.SUCCESS and msgpack.unpackb(resp.body) == {"acls": []}
        resp = await conn.request(CC.AUTH_LIST_USER, {})
        assert msgpack.unpackb(resp.body) == {
            "users": [{"username": "alice", "userType": "normal", "version": 1}]
        }
    finally:
        conn.close()

    follower = next(n for n in cluster.nodes.values() if n is not leader)
    conn = await RemotingClient.connect(cluster.address(follower.cfg.id))
    try:
        resp = await conn.request(CC.AUTH_DELETE_USER, {"username": "alice"})
        assert resp.code == RC.CONTROLLER_NOT_LEADER
        assert resp.header.get("leaderAddress") == cluster.address(leader.cfg.id)
    finally:
        conn.close()


async def test_a_controller_without_an_auth_key_refuses_secrets(tmp_path: Path) -> None:
    c = ServiceCluster(tmp_path, ids=("n0",))
    await c.start()
    try:
        leader = await c.leader()
        conn = await RemotingClient.connect(c.address(leader.cfg.id))
        try:
            resp = await conn.request(
                CC.AUTH_CREATE_USER, {"username": "alice"}, pack({"secret": "long-enough"})
            )
            assert resp.code == RC.SERVICE_NOT_AVAILABLE
            assert "auth_key_file" in str(resp.header.get("remark"))
            resp = await conn.request(CC.AUTH_LIST_USER, {})
            assert msgpack.unpackb(resp.body) == {"users": []}
        finally:
            conn.close()
    finally:
        await c.stop()
