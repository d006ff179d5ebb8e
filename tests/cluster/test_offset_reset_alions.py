"""A classic client follows an offset reset without a restart: the Node.js ``ali-ons`` push
consumer (tests/alions, mode ``listen``), which ignores RESET_CONSUMER_CLIENT_OFFSET and keeps
its own position, against real processes (three controllers, one broker). After
``rmqctl resetOffsetByTime`` to a time between two halves of 60 messages it consumed, its next
pull is answered PULL_OFFSET_MOVED to the reset offset, and it receives the second half again
and nothing of the first (docs/operations.md, "Resetting offsets")."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from client.producer import Producer
from tests.support.alions import SCRIPT, alions_env, create_topic, node
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "AlionsResetTopic"
GROUP = "alions-reset"
HALF = 30


async def test_alions_receives_the_messages_since_the_reset_time_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_group("broker-a", 1)
    env = alions_env(tmp_path)  # skips without node and npm (fails under CI=true)
    await create_topic(cluster, TOPIC, 2)
    proc = await asyncio.create_subprocess_exec(
        node(), str(SCRIPT), "listen", cluster.controllers[0].address, TOPIC, GROUP,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=env,
    )  # fmt: skip
    got: list[str] = []

    async def read_lines() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            text = line.decode().strip()
            if text.startswith("got "):
                got.append(text[4:])
            elif text == "ready":
                got.append("")

    reader = asyncio.ensure_future(read_lines())
    try:
        await wait_until_async(lambda: "" in got, "ali-ons to start", 60, on_timeout=cluster.logs)
        first = [f"first-{i}" for i in range(HALF)]
        second = [f"second-{i}" for i in range(HALF)]
        async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
            for body in first:
                await producer.send(TOPIC, body.encode())
            middle = int(time.time() * 1000) + 1
            await wait_until_async(lambda: time.time() * 1000 > middle + 1, "the clock to pass it")
            for body in second:
                await producer.send(TOPIC, body.encode())
        await wait_until_async(
            lambda: set(got) >= {*first, *second}, "ali-ons to consume the 60", 60,
            on_timeout=cluster.logs,
        )  # fmt: skip

        async def committed_all() -> bool:  # ali-ons persists its offsets every 500 ms
            done = await asyncio.to_thread(
                rmqctl, "-a", cluster.controller_addresses, "--json", "consumerProgress",
                "-g", GROUP, "-t", TOPIC,
            )  # fmt: skip
            return done.returncode == 0 and json.loads(done.stdout)["totalLag"] == 0

        await wait_until_async(committed_all, "ali-ons to commit the 60", 30)
        seen = len(got)
        done = await asyncio.to_thread(
            rmqctl, "-a", cluster.controller_addresses, "--json", "resetOffsetByTime",
            "-g", GROUP, "-t", TOPIC, "-s", str(middle),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert sum(q["previous"] - q["offset"] for q in json.loads(done.stdout)["queues"]) == HALF
        await wait_until_async(
            lambda: set(got[seen:]) >= set(second), "ali-ons to receive the second half again",
            60, on_timeout=cluster.logs,
        )  # fmt: skip
        assert set(got[seen:]) == set(second), "nothing of the first half"
    finally:
        if proc.stdin is not None and proc.returncode is None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            reader.cancel()
