"""kill -9 of the master while the classic client ali-ons produces (through the classic door,
nameSrv a controller): its sends fail while the group has no master, resume on the new master
once the controllers elected it and ali-ons refreshed its route, and nothing acknowledged is
lost: ali-ons' push consumer and our SDK read every acknowledged message afterwards. And while
it produces and consumes at once: its push consumer, running through the kill, receives every
acknowledged message after the failover (at least once: a message may come twice, its offset
commit having died with the master)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from client.bootstrap import Bootstrap
from client.consumer import Consumer
from tests.cluster.support import full_sync_state_set, new_master, node_at
from tests.support.alions import SCRIPT, alions_env, create_topic, node, run_alions
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "AlionsFailoverTopic"
COUNT = 60


async def _through_a_kill(
    cluster: Cluster, boot: Bootstrap, tmp_path: Path, topic: str, mode: str, *args: str
) -> tuple[list[str], dict[str, Any]]:
    """ali-ons' ``mode`` (keep-sending or keep-sending-and-consuming) against a group of 3,
    whose master is killed with -9 once 10 messages are acknowledged (and, consuming, once one
    was received); the lines ali-ons printed after the kill and its JSON."""
    cluster.add_group("broker-a", 3)
    old = (await full_sync_state_set(boot, cluster, size=3))["masterAddress"]
    await create_topic(cluster, topic, 4)
    consuming = mode == "keep-sending-and-consuming"
    proc = await asyncio.create_subprocess_exec(
        node(), str(SCRIPT), mode, cluster.controllers[0].address, topic, *args, str(COUNT),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path,
        env=alions_env(tmp_path),
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines: list[str] = []

        def count(prefix: str) -> int:
            return len([line for line in lines if line.startswith(prefix)])

        while count("acked") < 10 or (consuming and count("got") < 1):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line, (await proc.stderr.read()).decode()[-3000:]
            lines.append(line.decode().strip())
        node_at(cluster, old).kill9()
        await new_master(boot, cluster, old)
        out, err = await asyncio.wait_for(proc.communicate(), 150)
        assert proc.returncode == 0, err.decode()[-3000:] + cluster.logs()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    after = out.decode().strip().splitlines()
    return after[:-1], json.loads(after[-1])


async def test_alions_sends_resume_on_the_new_master_after_kill_9(
    cluster: Cluster, boot: Bootstrap, tmp_path: Path
) -> None:
    _, result = await _through_a_kill(cluster, boot, tmp_path, TOPIC, "keep-sending")
    acked = {a["body"] for a in result["acked"]}
    assert acked == {f"keep-{i}" for i in range(COUNT)}
    assert result["errors"] > 0  # the kill was felt: some sends failed and were sent again

    # Nothing acknowledged is lost: ali-ons' consumer and our SDK read every one.
    consumed = await run_alions(
        cluster, tmp_path, "consume", TOPIC, "alions-after", str(len(acked))
    )
    assert acked <= {m["body"] for m in consumed["received"]}
    got: set[str] = set()
    async with Consumer(cluster.controller_addresses, "sdk-after", TOPIC) as consumer:

        async def read_all() -> bool:
            got.update(r.body.decode() for r in await consumer.receive(timeout=0.5))
            return acked <= got

        await wait_until_async(read_all, "every acknowledged message", 30, on_timeout=cluster.logs)


async def test_alions_consumption_resumes_after_kill_9_of_the_master(
    cluster: Cluster, boot: Bootstrap, tmp_path: Path
) -> None:
    after, result = await _through_a_kill(
        cluster, boot, tmp_path, "AlionsBothTopic", "keep-sending-and-consuming", "alions-both"
    )
    acked = {a["body"] for a in result["acked"]}
    assert acked == {f"keep-{i}" for i in range(COUNT)}
    assert result["errors"] > 0  # the kill was felt by the producer
    # Consumption resumed: the consumer that ran through the kill received messages after it,
    # and every acknowledged one (ali-ons waited for them; at least once, so duplicates are
    # allowed: an offset committed to the dead master may not have reached the new one).
    got_after = {line.removeprefix("got ") for line in after if line.startswith("got ")}
    acked_after = {f"keep-{line.split()[1]}" for line in after if line.startswith("acked ")}
    assert acked_after and acked_after <= got_after, after
    assert acked <= set(result["received"])
    assert set(result["received"]) <= acked  # and nothing that was not sent
