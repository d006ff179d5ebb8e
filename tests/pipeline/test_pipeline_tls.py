"""The ``rmq`` source and sink over TLS (options ``tls`` and ``caFile``) on the shared local[2]
session, against a lone broker of its own with TLS on its client port and a test CA made with
the openssl CLI: a batch write read back, the stream reader's reads and group commits over TLS,
and plaintext reads and writes of the TLS port failing at once with a clear error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from client.admin import Admin
from client.progress import ProgressAdmin
from pipeline.options import ReadOptions
from pipeline.rows import message_schema
from pipeline.stream_reader import RmqStreamReader
from remoting.tls import client_context
from tests.support.procs import BrokerProc, started
from tests.support.tls import Pki, make_ca
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

TOPIC = "SparkTls"
PLAINTEXT_HINT = r"this port speaks TLS \(set option tls or caFile\)"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_ca(tmp_path_factory.mktemp("pipeline-pki"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[BrokerProc]:
    """A lone broker serving TLS on its client port (no client certificates asked)."""
    cert, key = pki.issue("broker")
    proc = BrokerProc(
        tmp_path_factory.mktemp("pipeline-tls-broker"),
        name="broker-tls",
        extra_toml=f'tls_enabled = true\ntls_cert = "{cert}"\ntls_key = "{key}"\n',
    )
    with started(proc):
        yield proc


def test_write_read_and_commit_over_tls_and_plaintext_fails_clearly(
    spark: SparkSession, tls_broker: BrokerProc, pki: Pki, tmp_path: Path
) -> None:
    address, ca = tls_broker.address, str(pki.ca)

    async def create() -> None:
        async with Admin(address, 5.0, None, client_context(pki.ca)) as admin:
            await admin.create_topic(TOPIC, 2)

    asyncio.run(create())

    # Batch write over TLS (caFile alone turns it on), then read back over TLS.
    rows = [(f"k{i}", f"tls-{i}") for i in range(40)]
    df = spark.createDataFrame(rows, "keys string, body string")
    df.write.format("rmq").option("controllers", address).option("topic", TOPIC).option(
        "caFile", ca
    ).mode("append").save()
    read = (
        spark.read.format("rmq")
        .option("controllers", address)
        .option("topic", TOPIC)
        .option("tls", "true")
        .option("caFile", ca)
        .load()
    )
    got = {(r["keys"], bytes(r["body"]).decode()) for r in read.collect()}
    assert got == set(rows)

    # The stream reader (driven here as Spark's driver drives it) reads over TLS and commits
    # its processed offsets as its group's over TLS too.
    opts = {"controllers": address, "topic": TOPIC, "startingOffsets": "earliest"}
    stream = RmqStreamReader(
        ReadOptions.parse({**opts, "groupId": "spark-tls", "caFile": ca}, "stream"),
        message_schema(),
    )
    begin = stream.initialOffset()
    end = stream.latestOffset(begin, stream.getDefaultReadLimit())
    parts = stream.partitions(begin, end)
    assert sum(b.num_rows for p in parts for b in stream.read(p)) == 40
    stream.commit(end)

    def committed() -> int:
        async def ask() -> int:
            async with ProgressAdmin(address, 5.0, None, client_context(pki.ca)) as admin:
                answers = await admin.consume_stats("spark-tls", TOPIC)
            return sum(
                q.consumer_offset or 0
                for a in answers
                if a.stats is not None
                for q in a.stats.groups.get("spark-tls", ())
            )

        return asyncio.run(ask())

    wait_until(lambda: committed() == 40, "the group's offsets committed over TLS", 30)

    # Without tls, the TLS port closes the connection, and the client finds it speaks TLS: a
    # clear error on the driver, no hang.
    plain = spark.read.format("rmq").option("controllers", address).option("topic", TOPIC)
    with pytest.raises(Exception, match=rf"controllers unreachable: .*{PLAINTEXT_HINT}"):
        plain.load().count()
    with pytest.raises(Exception, match=PLAINTEXT_HINT):
        df.write.format("rmq").option("controllers", address).option("topic", TOPIC).mode(
            "append"
        ).save()
    # A CA file missing on the driver names the option.
    with pytest.raises(Exception, match=r"option caFile: cannot read CA file"):
        plain.option("caFile", str(tmp_path / "missing.crt")).load().count()


def test_rmq_pipeline_flags_reach_the_precheck_over_tls(tls_broker: BrokerProc, pki: Pki) -> None:
    """``rmq-pipeline --ca-file`` (or ``$RMQ_CA_FILE``) reaches the TLS port in its pre-check:
    an unknown topic is reported as such; without the flag the job stops there, one line naming
    the flags. No Spark starts either way."""
    from click.testing import CliRunner

    from pipeline.cli import cli

    job = ["traffic", "-a", tls_broker.address, "-t", "NoSuchTopic"]
    runner = CliRunner()
    for args, env in (
        (["--ca-file", str(pki.ca), *job], {}),
        (job, {"RMQ_CA_FILE": str(pki.ca)}),
    ):
        done = runner.invoke(cli, args, env=env)
        assert done.exit_code == 1, done.output
        assert done.output == (
            f"rmq-pipeline: topic 'NoSuchTopic' does not exist (asked {tls_broker.address})\n"
        )
    done = runner.invoke(cli, job, env={"RMQ_CA_FILE": None})
    assert done.exit_code == 1, done.output
    assert done.output.startswith("rmq-pipeline: controllers unreachable: ")
    assert done.output.endswith(": this port speaks TLS (use --tls or --ca-file)\n")
