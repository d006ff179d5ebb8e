"""The SDK is quiet by default: a plain script's stdout holds only what the script prints.

A script that uses Producer and Consumer against a real broker, run as its own process: without
any logging configuration the SDK's info lines ("group members changed", "rebalanced") appear
nowhere and a warning is one line on stderr; once the script configures structlog (or the
standard library's logging), the SDK's lines follow that configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import ROOT, BrokerProc, module_broker

pytestmark = pytest.mark.multiprocess

SCRIPT = """
import asyncio
import sys

from client import Consumer, Producer
from client.admin import Admin
from client.logs import get_logger

if sys.argv[2] == "structlog":
    import structlog

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stdout))
elif sys.argv[2] == "stdlib":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


async def main(address: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic("LogT", 2)
    async with Producer(address) as producer:
        await producer.send("LogT", b"hello")
    fast = {"heartbeat_interval": 0.2, "commit_interval": 0.2, "suspend_ms": 300}
    async with Consumer(address, "log-g", "LogT", **fast) as consumer:
        got = []
        while not got:
            got = await consumer.receive(0.2)
    print("received", got[0].body.decode())
    get_logger("client.probe").warning("probe warning", detail="two words")


asyncio.run(main(sys.argv[1]))
"""


broker = module_broker("sdklog")


def run_script(broker: BrokerProc, tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(script), broker.address, mode],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_script_that_configures_no_logging_sees_only_its_own_output(
    broker: BrokerProc, tmp_path: Path
) -> None:
    done = run_script(broker, tmp_path, "plain")
    assert done.stdout == "received hello\n"
    # Warnings still reach stderr, one line each; info lines go nowhere.
    assert done.stderr == "probe warning detail='two words'\n"


def test_a_script_that_configures_structlog_sees_the_sdk_lines(
    broker: BrokerProc, tmp_path: Path
) -> None:
    done = run_script(broker, tmp_path, "structlog")
    lines = done.stdout.splitlines()
    assert "received hello" in lines
    assert any("group members changed" in line and "log-g" in line for line in lines), lines
    assert any("rebalanced" in line for line in lines), lines
    assert any("probe warning" in line for line in lines), lines
    assert done.stderr == ""


def test_a_script_that_configures_stdlib_logging_sees_the_sdk_lines(
    broker: BrokerProc, tmp_path: Path
) -> None:
    done = run_script(broker, tmp_path, "stdlib")
    assert done.stdout == "received hello\n"
    lines = done.stderr.splitlines()
    assert any(
        line.startswith("INFO client.consumer: group members changed group=log-g") for line in lines
    ), lines
    assert "WARNING client.probe: probe warning detail='two words'" in lines
