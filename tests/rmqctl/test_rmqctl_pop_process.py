"""rmqctl consumeMessage --pop against a real lone broker: two runs share a group's messages,
each printed message is acked (a third run finds nothing), --json lines carry the attempt."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from client.admin import Admin
from client.producer import Producer
from client.simple_consumer import PopMessage, SimpleConsumer
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]


def rmqctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "rmqctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_consume_message_pop_prints_and_acks(broker: BrokerProc) -> None:
    a = broker.address

    async def fill() -> set[str]:
        async with Admin(a) as admin:
            await admin.create_topic("T", 2)
        async with Producer(a) as p:
            return {(await p.send("T", f"m{i}".encode())).msg_id for i in range(30)}

    sent = asyncio.run(fill())
    base = ("--json", "consumeMessage", "-a", a, "-t", "T", "-g", "G", "--pop")
    first = rmqctl(*base, "--count", "10", "--timeout", "30", "--invisible-time", "1")
    rest = rmqctl(*base, "--count", "20", "--timeout", "30", "--invisible-time", "1")
    assert first.returncode == 0 and rest.returncode == 0, (first.stderr, rest.stderr)
    lines = [json.loads(x) for x in (first.stdout + rest.stdout).splitlines()]
    assert len(lines) == 30 and {m["msgId"] for m in lines} == sent
    assert {m["attempt"] for m in lines} == {1}
    # Everything printed was acked: nothing comes back, even past the invisible time.

    async def left() -> list[PopMessage]:
        async with SimpleConsumer(a, "G", "T") as consumer:
            return await consumer.receive(30, invisible_duration=30, wait=1.5)

    assert asyncio.run(left()) == []
    bad = rmqctl("consumeMessage", "-a", a, "-t", "T", "-g", "G", "--pop", "--invisible-time", "0")
    assert bad.returncode == 2 and "invisible-time" in bad.stderr
