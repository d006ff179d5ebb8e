"""The pipeline's pure parts: offsets, options, record decoding, the re-balance plan (no Spark
session, no broker)."""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from client.routes import MessageQueue
from pipeline import offsets as ofs
from pipeline.cli import short_error
from pipeline.errors import OptionError
from pipeline.options import ReadOptions, WriteOptions
from pipeline.rows import RecordDecodeError, arrow_schema, message_schema, scan, to_batch
from pipeline.tls import ClientTls, context_of
from pipeline.traffic import rebalance_plan
from protocol.message import Message, RecordEncoder, encode_blank, iter_records
from tests.support.tls import make_ca

A0, A1, A10, B0 = (
    MessageQueue("broker-a", 0),
    MessageQueue("broker-a", 1),
    MessageQueue("broker-a", 10),
    MessageQueue("broker-b", 0),
)


def test_offsets_json_is_canonical_and_round_trips() -> None:
    offsets = {B0: 5, A10: 3, A1: 2, A0: 1}
    doc = ofs.to_json(offsets)
    # Brokers by name, queues by number (10 after 1): equal offsets give equal JSON.
    assert json.dumps(doc) == '{"broker-a": {"0": 1, "1": 2, "10": 3}, "broker-b": {"0": 5}}'
    assert ofs.from_json(json.loads(json.dumps(doc))) == offsets


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{bad json", "not valid JSON"),
        ('["broker-a"]', "must be a JSON object"),
        ('{"broker-a": 3}', "must be an object of queue id"),
        ('{"broker-a": {"x": 3}}', "queue id 'x'"),
        ('{"broker-a": {"0": -3}}', "must be an integer >= 0"),
        ('{"broker-a": {"0": "7"}}', "must be an integer >= 0"),
        ('{"broker-a": {"0": true}}', "must be an integer >= 0"),
    ],
)
def test_bad_offsets_json_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        ofs.parse_spec(text, "startingOffsets", "earliest")


def test_offset_specs_resolve_against_queue_bounds() -> None:
    bounds = {A0: ofs.QueueBounds(2, 10), A1: ofs.QueueBounds(0, 4)}
    assert ofs.parse_spec(None, "x", "latest") == "latest"
    assert ofs.parse_spec(" Earliest ", "x", "latest") == "earliest"
    resolve = lambda spec, default: ofs.resolve(  # noqa: E731
        spec, bounds, option="startingOffsets", default=default, topic="T"
    )
    assert resolve("earliest", "latest") == {A0: 2, A1: 0}
    assert resolve("latest", "earliest") == {A0: 10, A1: 4}
    spec = ofs.parse_spec('{"broker-a": {"0": 7}}', "x", "earliest")
    # JSON offsets name every queue (as Kafka's name every partition): say which is missing.
    with pytest.raises(OptionError, match=r"startingOffsets must name every queue.*broker-a/1"):
        resolve(spec, "earliest")
    assert resolve(ofs.parse_spec('{"broker-a": {"0": -1, "1": -2}}', "x", "e"), "e") == {
        A0: 10,
        A1: 0,
    }
    with pytest.raises(OptionError, match=r"names broker-b/0, not a queue of topic 'T'.*0\.\.1"):
        resolve(ofs.parse_spec('{"broker-b": {"0": 1}}', "x", "e"), "earliest")


def test_split_ranges_cuts_by_size_and_covers_every_offset() -> None:
    B0 = MessageQueue("broker-b", 0)
    assert ofs.split_ranges([(A0, 0, 10)], None) == [(A0, 0, 10)]
    assert ofs.split_ranges([(A0, 0, 10), (A1, 5, 5)], 1) == [(A0, 0, 10)]
    assert ofs.split_ranges([(A0, 0, 10)], 3) == [(A0, 0, 4), (A0, 4, 7), (A0, 7, 10)]
    assert ofs.split_ranges([(A0, 0, 2)], 8) == [(A0, 0, 1), (A0, 1, 2)]  # one per message
    # Parts in proportion to size: 90 and 10 messages into 10 -> 9 and 1.
    got = ofs.split_ranges([(A0, 0, 90), (B0, 100, 110)], 10)
    assert [r for r in got if r[0] == B0] == [(B0, 100, 110)]
    assert len(got) == 10
    for mq, lo, hi in ((A0, 0, 90), (B0, 100, 110)):
        pieces = [(a, b) for q, a, b in got if q == mq]
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(pieces[i][1] == pieces[i + 1][0] for i in range(len(pieces) - 1))


def test_option_names_are_checked_with_the_nearest_suggested() -> None:
    base = {"controllers": "127.0.0.1:9876", "topic": "T"}
    with pytest.raises(OptionError, match=r"unknown option 'startingOffset'.*startingOffsets\?"):
        ReadOptions.parse({**base, "startingOffset": "latest"})
    with pytest.raises(
        OptionError,
        match=r"unknown option 'zzz'.*the options are accessKey, assign, caFile, controllers",
    ):
        ReadOptions.parse({**base, "zzz": "1"})
    with pytest.raises(OptionError, match=r"'batchsise'.*did you mean batchSize"):
        WriteOptions.parse({"controllers": "127.0.0.1:1", "batchsise": "3"})
    # Spark's own options (load(path), a sink's checkpoint) pass.
    ReadOptions.parse({**base, "path": "x", "checkpointLocation": "/tmp/c"})
    stream = ReadOptions.parse(
        {**base, "minOffsetsPerTrigger": "5", "maxTriggerDelay": "2m", "minPartitions": "3"},
        "stream",
    )
    assert (stream.min_offsets_per_trigger, stream.max_trigger_delay, stream.min_partitions) == (
        5,
        120.0,
        3,
    )
    assert ReadOptions.parse(base, "stream").max_trigger_delay == 15 * 60
    assert ReadOptions.parse({**base, "groupId": "etl-1"}, "stream").group_id == "etl-1"
    assert ReadOptions.parse({**base, "maxTriggerDelay": "250"}, "stream").max_trigger_delay == 0.25
    timed = ReadOptions.parse({**base, "startingTimestamp": "1700000000000"})
    assert timed.starting == ofs.ByTimestamp(every=1_700_000_000_000)
    cases = [
        ({**base, "maxTriggerDelay": "soon"}, "stream", "must be a duration"),
        ({**base, "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "3"}, "stream", "exceed"),
        ({**base, "minOffsetsPerTrigger": "9"}, "batch", "for streaming queries only"),
        ({**base, "endingTimestamp": "9"}, "stream", "for batch queries only"),
        ({**base, "endingTimestamp": "9", "endingOffsets": "latest"}, "batch", "exclude"),
        ({**base, "startingTimestamp": "-1"}, "batch", "must be >= 0"),
        ({**base, "startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, "batch", "integer >= 0"),
        ({**base, "minPartitions": "0"}, "batch", "must be >= 1"),
        ({**base, "groupId": "g"}, "batch", "groupId is for streaming queries only"),
        ({**base, "groupId": "no spaces"}, "stream", "must be a consumer group name"),
    ]
    for options, mode, message in cases:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options, mode)  # type: ignore[arg-type]


def test_tls_options_are_checked_on_the_driver(tmp_path: Path) -> None:
    """``tls`` and ``caFile``: parsed for reads and writes, caFile implies TLS, contradictions
    and bad values name the option, misspellings get the nearest name, the options pickle (they
    travel to the tasks) and a CA file that cannot be read fails when the context is built."""
    import pickle

    base = {"controllers": "127.0.0.1:9876", "topic": "T"}
    assert ReadOptions.parse(base).tls is None
    assert ReadOptions.parse({**base, "tls": "false"}).tls is None
    assert ReadOptions.parse({**base, "tls": "true"}).tls == ClientTls(None)
    ca = tmp_path / "ca.crt"
    read = ReadOptions.parse({**base, "cafile": f" {ca} "})  # Spark lower-cases the names
    assert read.tls == ClientTls(str(ca))
    assert WriteOptions.parse({**base, "caFile": str(ca), "tls": "TRUE"}).tls == ClientTls(str(ca))
    assert pickle.loads(pickle.dumps(read)) == read
    cases = [
        ({**base, "tls": "maybe"}, r"option tls must be true or false, not 'maybe'"),
        ({**base, "tls": "false", "caFile": str(ca)}, r"tls=false and caFile disagree"),
        ({**base, "caFile": "  "}, r"option caFile must be the path of a PEM CA file"),
        ({**base, "caFiles": str(ca)}, r"unknown option 'caFiles'.*did you mean caFile\?"),
        ({**base, "tsl": "true"}, r"unknown option 'tsl'.*did you mean tls\?"),
    ]
    for options, message in cases:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options)
        with pytest.raises(OptionError, match=message):
            WriteOptions.parse(options)
    # The file is read where a connection pool is made (the driver's snapshot comes first).
    with pytest.raises(OptionError, match=r"option caFile: cannot read CA file .*ca.crt"):
        context_of(read.tls)
    ca.write_text("not a certificate\n")
    with pytest.raises(OptionError, match=r"option caFile: CA file .*ca.crt"):
        context_of(read.tls)
    make_ca(tmp_path / "pki").ca.replace(ca)
    context = context_of(read.tls)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname and context_of(None) is None


def test_offsets_behind_latest_from_a_progress_report() -> None:
    from pipeline.progress import offsets_behind

    source = {
        "endOffset": '{"broker-a": {"0": 5, "1": 9}, "broker-b": {"0": 0}}',
        "latestOffset": {"broker-a": {"0": 15, "1": 9}, "broker-b": {"0": 2}},
    }
    assert offsets_behind(source) == {
        "avgOffsetsBehindLatest": 4.0,
        "maxOffsetsBehindLatest": 10.0,
        "minOffsetsBehindLatest": 0.0,
    }
    assert offsets_behind({"endOffset": "{}", "latestOffset": None}) is None


def test_limit_rows_shares_the_budget_by_backlog() -> None:
    start = {A0: 0, A1: 100, B0: 50}
    end = {A0: 300, A1: 200, B0: 50}  # backlogs 300, 100, 0
    limited = ofs.limit_rows(start, end, 40)
    assert limited == {A0: 30, A1: 110, B0: 50}
    assert ofs.limit_rows(start, end, 1000) == end  # enough budget: unchanged
    # Remainders go to the largest fractions; the whole budget is used, deterministically.
    odd = ofs.limit_rows({A0: 0, A1: 0, A10: 0}, {A0: 10, A1: 10, A10: 10}, 7)
    assert sum(odd.values()) == 7 and odd == ofs.limit_rows(
        {A0: 0, A1: 0, A10: 0}, {A10: 10, A1: 10, A0: 10}, 7
    )
    # A queue new in end (no start) is not read, so it takes no budget.
    assert ofs.limit_rows({A0: 0}, {A0: 10, A1: 5}, 4) == {A0: 4, A1: 5}


def test_read_options_check_every_value() -> None:
    base = {"controllers": "127.0.0.1:9876", "topic": "T"}
    opts = ReadOptions.parse({**base, "failonDataLoss": "FALSE", "pullBatchSize": "32"})
    assert (opts.starting, opts.ending, opts.fail_on_data_loss, opts.pull_batch_size) == (
        "earliest",
        "latest",
        False,
        32,
    )
    assert ReadOptions.parse(base, "stream").starting == "latest"
    cases = [
        ({"topic": "T"}, "option controllers is required"),
        ({"controllers": "nohost", "topic": "T"}, "not a host:port"),
        ({"controllers": "127.0.0.1:9876"}, "option topic is required"),
        ({**base, "failOnDataLoss": "maybe"}, "must be true or false"),
        ({**base, "pullBatchSize": "0"}, "must be >= 1"),
        ({**base, "rowsPerBatch": "many"}, "must be an integer"),
        ({**base, "maxOffsetsPerTrigger": "10"}, "for streaming queries only"),
    ]
    for options, message in cases:
        with pytest.raises(OptionError, match=message):
            ReadOptions.parse(options)
    with pytest.raises(OptionError, match="for batch queries only"):
        ReadOptions.parse({**base, "endingOffsets": "latest"}, "stream")
    assert WriteOptions.parse({"controllers": "127.0.0.1:1"}).topic is None


def _records(count: int, encoder: RecordEncoder, start_offset: int = 0) -> bytes:
    out = b""
    for i in range(count):
        msg = Message(
            topic="T",
            body=b"body%d" % i,
            keys=f"k{i}" if i % 2 else "",
            tags="t" if i % 3 == 0 else "",
            properties={"p": str(i)} if i % 2 == 0 else {},
            born_timestamp=1_700_000_000_000 + i,
            born_host="10.1.2.3:4444",
        )
        out += encoder.encode(
            msg,
            queue_id=3,
            queue_offset=start_offset + i,
            physical_offset=len(out) + 1000,
            store_timestamp=1_700_000_000_500 + i,
        )
    return out


def _decode(buf: bytes, **kw: Any) -> list[dict[str, Any]]:
    found = scan(buf)
    assert found.error is None
    schema = arrow_schema(message_schema(store=True))
    return to_batch(buf, found.positions, schema, "broker-x", **kw).to_pylist()


def test_columnar_decoding_matches_the_protocol_decoder() -> None:
    encoder = RecordEncoder("192.168.0.9:10911")
    buf = _records(7, encoder, start_offset=40)
    found = scan(buf)
    assert (found.pos, found.ended, len(found.positions)) == (len(buf), True, 7)
    rows = _decode(buf, topic="T", expect_offset=40)
    for row, rec in zip(rows, iter_records(buf), strict=True):
        assert row["msgId"] == rec.msg_id and row["brokerName"] == "broker-x"
        assert (row["topic"], row["queueId"], row["queueOffset"]) == ("T", 3, rec.queue_offset)
        assert row["body"] == rec.body
        assert row["keys"] == (rec.keys or None) and row["tags"] == (rec.tags or None)
        expected = {k: v for k, v in rec.properties.items() if k not in ("KEYS", "TAGS")}
        assert dict(row["properties"]) == expected
        born = row["bornTimestamp"].timestamp() * 1000
        assert round(born) == rec.born_timestamp
        assert round(row["storeTimestamp"].timestamp() * 1000) == rec.store_timestamp
        assert (row["physicalOffset"], row["size"]) == (rec.physical_offset, rec.size)
        assert (row["bornHost"], row["storeHost"]) == ("10.1.2.3:4444", "192.168.0.9:10911")
    # max_records stops early and says where; a blank tail or zeros end the data.
    part = scan(buf, max_records=3)
    assert len(part.positions) == 3 and not part.ended
    rest = scan(buf, part.pos)
    assert len(rest.positions) == 4 and rest.ended
    blank_tail = scan(buf + encode_blank(64) + _records(1, encoder))
    assert (len(blank_tail.positions), blank_tail.ended, blank_tail.pos) == (7, True, len(buf))
    zeros = scan(buf + bytes(100))
    assert (len(zeros.positions), zeros.ended, zeros.pos) == (7, True, len(buf))
    # A topic filter keeps the matching records; an expected topic rejects others.
    assert _decode(buf, only_topic="T") == rows and _decode(buf, only_topic="U") == []
    with pytest.raises(RecordDecodeError, match="record of another topic than 'U'"):
        _decode(buf, topic="U")


def test_decoding_names_the_bad_record() -> None:
    encoder = RecordEncoder("127.0.0.1:1")
    buf = bytearray(_records(3, encoder))
    second = int.from_bytes(buf[0:4], "big")
    buf[second + 80] ^= 0xFF  # a body byte of the second record
    found = scan(bytes(buf))
    assert found.positions == [0] and found.pos == second and not found.ended
    assert found.error is not None and str(found.error) == f"CRC mismatch at byte {second}"
    with pytest.raises(RecordDecodeError, match="queue offset 0 where 5 was expected"):
        _decode(_records(1, encoder), expect_offset=5)
    bad_magic = scan(b"\x00\x00\x00\x50" + b"\x01" * 80)
    assert bad_magic.error is not None and "bad magic" in str(bad_magic.error)


def test_rebalance_plan_moves_busiest_topics_to_idlest_groups() -> None:
    rates = {
        ("orders", "broker-a"): 9000.0,
        ("clicks", "broker-a"): 4000.0,
        ("logs", "broker-b"): 1000.0,
    }
    queues = {("orders", "broker-a"): 8, ("clicks", "broker-a"): 4, ("logs", "broker-b"): 8}
    groups = ["broker-a", "broker-b", "broker-c"]
    plan = rebalance_plan(rates, groups, queues, threshold=5000)
    assert plan["rebalance"] is True
    assert plan["groupsBefore"] == {"broker-a": 13000.0, "broker-b": 1000.0, "broker-c": 0.0}
    # orders -> the idlest group (a, by name among zeros), clicks -> b, logs -> c.
    assert plan["assignments"] == {"orders": "broker-a", "clicks": "broker-b", "logs": "broker-c"}
    assert plan["groupsAfter"] == {"broker-a": 9000.0, "broker-b": 4000.0, "broker-c": 1000.0}
    assert plan["spreadBefore"] == 13000.0 and plan["spreadAfter"] == 8000.0
    assert plan["moves"] == [
        {
            "topic": "clicks",
            "msgPerSec": 4000.0,
            "from": ["broker-a"],
            "to": "broker-b",
            "queues": 4,
        },
        {"topic": "logs", "msgPerSec": 1000.0, "from": ["broker-b"], "to": "broker-c", "queues": 8},
    ]
    json.dumps(plan)  # an operator gets it as JSON
    calm = rebalance_plan(rates, groups, queues, threshold=20000)
    assert calm["rebalance"] is False and calm["moves"] == [] and "within" in calm["reason"]
    alone = rebalance_plan({("t", "broker-a"): 1e6}, ["broker-a"], {}, threshold=0)
    assert alone["rebalance"] is False and "fewer than two" in alone["reason"]


def test_short_error_finds_our_message_inside_sparks() -> None:
    wrapped = RuntimeError(
        "[PYTHON_DATA_SOURCE_ERROR] Failed\nTraceback...\n"
        "pipeline.errors.PipelineError: topic 'nope' does not exist (asked 127.0.0.1:1)\n"
        "\tat org.apache.spark..."
    )
    assert short_error(wrapped) == "topic 'nope' does not exist (asked 127.0.0.1:1)"
    assert short_error(ValueError("\nfirst line\nsecond")) == "first line"


def test_cli_usage_errors_stop_before_spark_starts() -> None:
    from click.testing import CliRunner

    from pipeline.cli import cli

    runner = CliRunner()
    base = ["archive", "-a", "127.0.0.1:1", "-t", "T", "--output", "o", "--checkpoint", "c"]
    bad_json = runner.invoke(cli, [*base, "--starting-offsets", '{"broker-a": '])
    assert bad_json.exit_code == 2 and "not valid JSON" in bad_json.output
    bad_conf = runner.invoke(cli, ["--conf", "nonsense", *base])
    assert bad_conf.exit_code == 2 and "is not key=value" in bad_conf.output
    two_topics = runner.invoke(
        cli,
        [
            "traffic",
            "-a",
            "127.0.0.1:1",
            "-t",
            "A",
            "-t",
            "B",
            "--ending-offsets",
            '{"b": {"0": 1}}',
        ],
    )
    # Several topics take JSON keyed by topic (they were refused: "needs exactly one topic"); a
    # key that is none of them, as JSON keyed by broker group, is refused naming the form.
    assert two_topics.exit_code == 2, two_topics.output
    assert "with several -t, JSON offsets are keyed by topic" in two_topics.output
    assert "'b' is none of the topics A, B" in two_topics.output


def test_the_data_source_and_what_spark_ships_to_tasks_pickle() -> None:
    """Spark pickles the data source, its readers and writers, partitions and commit messages
    (classes by reference: each must stay importable from its module)."""
    import pickle

    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from pipeline.batch_reader import RmqBatchReader
    from pipeline.batch_writer import RmqBatchWriter
    from pipeline.partition import RangePartition
    from pipeline.range_reader import QueueRange
    from pipeline.source import RmqDataSource
    from pipeline.stream_reader import RmqStreamReader
    from pipeline.stream_writer import RmqStreamWriter
    from pipeline.write import RmqCommitMessage, WriteSetup

    options = {"controllers": "127.0.0.1:9876", "topic": "T"}
    source = pickle.loads(pickle.dumps(RmqDataSource(options)))
    assert isinstance(source, RmqDataSource) and source.options == options
    schema = message_schema()
    for reader_type in (RmqBatchReader, RmqStreamReader):
        reader = reader_type(ReadOptions.parse(options), schema)
        copy = pickle.loads(pickle.dumps(reader))
        assert type(copy) is reader_type and (copy.opts, copy.schema) == (reader.opts, schema)
    qr = QueueRange("127.0.0.1:9876", "T", "broker-a", 0, 5, 9)
    partition = pickle.loads(pickle.dumps(RangePartition(qr)))
    assert isinstance(partition, RangePartition) and partition.qr == qr == partition.value
    setup = WriteSetup(WriteOptions.parse(options), 0, False, -1, -1, -1, -1)
    for writer_type in (RmqBatchWriter, RmqStreamWriter):
        writer = pickle.loads(pickle.dumps(writer_type(setup)))
        assert type(writer) is writer_type and writer.setup == setup
    done = RmqCommitMessage(rows=3, acknowledged=3, spans={("T", "broker-a", 0): [5, 7]})
    assert pickle.loads(pickle.dumps(done)) == done


def test_a_rows_message_group_is_carried_as_the_messages_group() -> None:
    """The messageGroup column picks the queue and is the message's group (``__SHARDINGKEY``,
    what FIFO consumers and the official clients read); one that cannot be a group is an error
    naming the row."""
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from pipeline.errors import WriteError
    from pipeline.write import WriteSetup, _items

    def items(groups: list[Any], group_type: Any) -> list[tuple[str, bytes | None, Any, Any]]:
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([f"m{i}" for i in range(len(groups))]),
                pa.array(
                    [{"color": "red"}] + [None] * (len(groups) - 1),
                    pa.map_(pa.string(), pa.string()),
                ),
                pa.array(groups, group_type),
            ],
            names=["body", "properties", "messageGroup"],
        )
        options = WriteOptions.parse({"controllers": "127.0.0.1:9876", "topic": "T"})
        return list(_items(WriteSetup(options, 0, True, -1, -1, 1, -1, 2), batch, 10))

    got = items(["order-1", None, "order-2"], pa.string())
    assert [(topic, group) for topic, group, _, _ in got] == [
        ("T", b"order-1"), ("T", None), ("T", b"order-2")
    ]  # fmt: skip
    assert [item.get("properties") for _, _, _, item in got] == [
        {"color": "red", "__SHARDINGKEY": "order-1"}, None, {"__SHARDINGKEY": "order-2"}
    ]  # fmt: skip
    binary = items([b"order-1", "g\u00e9".encode()], pa.binary())
    assert [item["properties"]["__SHARDINGKEY"] for *_, item in binary] == ["order-1", "g\u00e9"]
    with pytest.raises(WriteError, match="row 12 has a messageGroup that is not UTF-8"):
        items([b"ok", b"\xff\xfe"], pa.binary())
    with pytest.raises(WriteError, match=r"row 11 has a bad messageGroup: .* must not be empty"):
        items([""], pa.string())
    with pytest.raises(WriteError, match=r"row 11 has a bad messageGroup: .* exceeds the limit"):
        items(["g" * 129], pa.string())


def test_cli_connection_flags_reach_every_job_as_source_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from client import Credentials
    from pipeline import cli as cli_module
    from pipeline.archive import ArchiveSpec
    from pipeline.cli import cli

    specs: list[Any] = []

    def job(_spark: Any, spec: Any) -> Any:
        specs.append(spec)
        raise RuntimeError("stop here")

    monkeypatch.setattr(cli_module, "_precheck", lambda *args: None)
    monkeypatch.setattr(cli_module, "_session", lambda *args: None)
    monkeypatch.setattr(cli_module, "run_archive", job)
    monkeypatch.setattr(cli_module, "run_traffic", job)
    runner = CliRunner(env=dict.fromkeys(("RMQ_TLS", "RMQ_CA_FILE", "RMQ_SECRET_KEY")))
    archive = ["archive", "-a", "127.0.0.1:1", "-t", "T", "--output", "o", "--checkpoint", "c"]
    traffic = ["traffic", "-a", "127.0.0.1:1", "-t", "T"]
    env = {"RMQ_ACCESS_KEY": "app", "RMQ_SECRET_KEY": "app-secret"}
    ca = str(tmp_path / "ca.pem")
    for args in (archive, traffic):
        done = runner.invoke(cli, ["--ca-file", ca, *args], env=env)
        assert done.output == "rmq-pipeline: stop here\n", done.output
    assert isinstance(specs[0], ArchiveSpec)
    for spec in specs:
        options = dict(spec.connection)
        assert options == {
            "accessKey": "app",
            "secretKey": "app-secret",
            "tls": "true",
            "caFile": ca,
        }
        read = ReadOptions.parse({"controllers": "127.0.0.1:1", "topic": "T", **options})
        assert read.credentials == Credentials("app", "app-secret")
        assert read.tls == ClientTls(ca)
    runner.invoke(cli, ["--tls", *traffic], env={"RMQ_ACCESS_KEY": None})
    assert dict(specs[-1].connection) == {"tls": "true"}
    runner.invoke(cli, traffic, env={"RMQ_ACCESS_KEY": None})
    assert specs[-1].connection == ()

    half = runner.invoke(cli, traffic, env={"RMQ_ACCESS_KEY": "app"})
    assert half.exit_code == 2
    assert "give both --access-key and --secret-key" in half.output
    empty = runner.invoke(cli, ["--ca-file", " ", *traffic])
    assert empty.exit_code == 2 and "--ca-file" in empty.output and "not empty" in empty.output
    assert len(specs) == 4  # the bad flags stopped before any job
