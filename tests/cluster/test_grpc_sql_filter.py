"""The official RocketMQ 5 Python client (rocketmq-python-client) subscribes with a SQL92
FilterExpression through a broker's gRPC endpoint (issue 32 item 1): its SimpleConsumer receives
exactly the messages whose properties match (picked here by plain Python), and the group's
offsets end at the queues' ends; a malformed expression is refused ILLEGAL_FILTER_EXPRESSION
with its position, and a broker with enable_property_filter off answers UNSUPPORTED."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from client.admin import Admin
from client.producer import Producer
from tests.support.official_client import SQL92_CONSUMER, run_to_end
from tests.support.procs import BrokerProc, free_port, started

pytestmark = pytest.mark.multiprocess

TOPIC = "GrpcSql"
SENT = 300


def props_of(i: int) -> dict[str, str]:
    props = {"region": ["eu", "us", "ap"][i % 3], "amount": str((i * 37) % 200)}
    if i % 7 == 0:
        del props["amount"]
    return props


EXPR = "region IN ('eu', 'ap') AND amount > 150 OR amount IS NULL AND region = 'us'"


def matches(p: dict[str, str]) -> bool:
    big = "amount" in p and p["region"] in ("eu", "ap") and int(p["amount"]) > 150
    return big or ("amount" not in p and p["region"] == "us")


def grpc_broker(tmp: Path, on: bool) -> tuple[BrokerProc, int]:
    port = free_port()
    proc = BrokerProc(
        tmp,
        extra=["--grpc-listen", f"127.0.0.1:{port}"],
        extra_toml="enable_property_filter = true\n" if on else "",
    )
    return proc, port


async def _official(tmp: Path, *args: str) -> dict[str, Any]:
    return await run_to_end([sys.executable, "-c", SQL92_CONSUMER, *args, "60", "20"], tmp)


async def test_official_simple_consumer_with_a_sql92_filter(tmp_path: Path) -> None:
    proc, port = grpc_broker(tmp_path / "b", on=True)
    with started(proc) as broker:
        async with Admin(broker.address) as admin:
            await admin.create_topic(TOPIC, 2)
        async with Producer(broker.address) as producer:
            for i in range(SENT):
                await producer.send(TOPIC, f"m-{i}".encode(), properties=props_of(i))
        want = sorted(f"m-{i}" for i in range(SENT) if matches(props_of(i)))
        assert 10 < len(want) < SENT // 2
        endpoint = f"127.0.0.1:{port}"
        home = tmp_path / "home"
        home.mkdir()
        out = await _official(home, endpoint, TOPIC, "grpc-sql", str(len(want)), EXPR)
        assert out["error"] is None, out
        assert sorted(out["bodies"]) == want
        assert out["left"] == []

        # A malformed expression: ILLEGAL_FILTER_EXPRESSION naming the position.
        bad = await _official(home, endpoint, TOPIC, "grpc-bad", "1", "region = = 'eu'")
        assert bad["error"] is not None and "at position 9" in bad["error"], bad


async def test_official_client_sql92_to_a_broker_with_filters_off(tmp_path: Path) -> None:
    proc, port = grpc_broker(tmp_path / "b", on=False)
    with started(proc) as broker:
        async with Admin(broker.address) as admin:
            await admin.create_topic(TOPIC, 1)
        async with Producer(broker.address) as producer:
            await producer.send(TOPIC, b"x", properties={"region": "eu"})
        home = tmp_path / "home"
        home.mkdir()
        out = await _official(home, f"127.0.0.1:{port}", TOPIC, "g", "1", "region = 'eu'")
        assert out["error"] is not None, out
        assert "enable_property_filter" in out["error"], out
