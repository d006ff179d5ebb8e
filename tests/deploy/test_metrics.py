"""The metrics operators alert on: names, labels and values, and docs/metrics.md as their list.

A real (standalone) broker is started in-process and its registry read the way /metrics serves
it; the replication figures of a master are read from a stand-in HA service with known acks.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.broker import Broker
from broker.config import BrokerConfig
from controller.metadata.results import Replica, ReplicaInfo
from controller.metrics import ControllerMetrics
from protocol.codes import ResponseCode
from protocol.message import Message
from tests.broker.support import running, small_config

ROOT = Path(__file__).resolve().parents[2]


class StandInHA:
    """What the metrics read from a master's HAService."""

    confirm_offset = 4096
    slave_state = None  # a master

    def slave_acks(self) -> dict[int, int]:
        return {2: 1024, 3: 4096}

    def in_sync_members(self) -> frozenset[int]:
        return frozenset({1, 3})

    def refused_counts(self) -> dict[str, int]:
        return {"not_a_replica": 3, "no_handshake": 0}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(small_config(tmp_path, listen="127.0.0.1:0")) as b:
        yield b


def samples(registry: CollectorRegistry) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    """{sample name: {labels: value}} as Prometheus would parse /metrics."""
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset(kv.items())


IDENTITY = {"cluster": "DefaultCluster", "broker_name": "broker-a", "broker_id": "0"}


async def test_broker_exports_role_epoch_fencing_disk_and_send_errors(broker: Broker) -> None:
    broker.metrics.send_error(ResponseCode.FLUSH_SLAVE_TIMEOUT)
    got = samples(broker.metrics.registry)
    assert got["rmq_broker_role"] == {
        labels(**IDENTITY, role="master"): 1.0,
        labels(**IDENTITY, role="slave"): 0.0,
        labels(**IDENTITY, role="none"): 0.0,
    }
    assert got["rmq_broker_master_epoch"] == {labels(**IDENTITY): 0.0}
    assert got["rmq_broker_fenced"] == {labels(**IDENTITY): 0.0}
    (ratio,) = got["rmq_broker_disk_used_ratio"].values()
    assert 0.0 < ratio <= 1.0
    (size,) = got["rmq_broker_disk_size_bytes"].values()
    assert size > 0
    errors = got["rmq_broker_send_errors_total"]
    assert errors[labels(**IDENTITY, code="FLUSH_SLAVE_TIMEOUT")] == 1.0
    assert errors[labels(**IDENTITY, code="MASTER_FENCED")] == 0.0  # exported before any
    # Every series of the broker, process figures included, carries its identity.
    for name, series in got.items():
        for key in series:
            assert set(IDENTITY.items()) <= set(key), (name, key)
    assert "process_open_fds" in got and "process_max_fds" in got


async def test_master_fenced_flag_and_replication_figures(broker: Broker) -> None:
    broker.ctx.role_cell.swap(fenced=True)
    broker.ctx.ha = StandInHA()  # type: ignore[assignment]
    # 8 KiB of messages: the master is ahead of both stand-in slaves' acks.
    body = b"x" * 1024
    batch = [Message(topic="T", body=body, born_host="10.0.0.7:4242") for _ in range(8)]
    broker.ctx.store.put("T", 0, batch, now_ms=1_700_000_000_000)
    end = broker.ctx.store.max_offset
    assert end > 8 * 1024
    got = samples(broker.metrics.registry)
    assert got["rmq_broker_fenced"] == {labels(**IDENTITY): 1.0}
    assert got["rmq_broker_ha_slave_lag_bytes"] == {
        labels(**IDENTITY, slave_broker_id="2"): float(end - 1024),
        labels(**IDENTITY, slave_broker_id="3"): float(end - 4096),
    }
    assert got["rmq_broker_ha_confirm_offset_bytes"] == {labels(**IDENTITY): 4096.0}
    assert got["rmq_broker_ha_sync_state_set_size"] == {labels(**IDENTITY): 2.0}
    assert got["rmq_broker_ha_replication_refused"] == {labels(**IDENTITY): 0.0}
    assert got["rmq_broker_ha_refused_total"] == {
        labels(**IDENTITY, reason="not_a_replica"): 3.0,
        labels(**IDENTITY, reason="no_handshake"): 0.0,
    }
    assert got["rmq_broker_commitlog_max_offset_bytes"] == {labels(**IDENTITY): float(end)}


def test_broker_id_label_waits_for_the_controller_assigned_id(tmp_path: Path) -> None:
    cfg = BrokerConfig(
        listen="127.0.0.1:0",
        data_dir=tmp_path / "b",
        metrics_port=0,
        controllers="127.0.0.1:1",
        commitlog_segment_bytes=1 << 20,
    )
    b = Broker(cfg)
    assert b.metrics.broker_id() == ""  # controller mode, no id yet
    b.ctx.role_cell.swap(broker_id=2)
    assert b.metrics.broker_id() == "2"
    # Not started: no data directory yet, so no disk figures, and the scrape still answers.
    text = generate_latest(b.metrics.registry).decode()
    assert "rmq_broker_disk_used_ratio" not in text
    assert (
        'rmq_broker_role{broker_id="2",broker_name="broker-a",cluster="DefaultCluster",role="none"} 1.0'
        in text
    )


def test_controller_group_figures_include_replicas_and_forget_removed_groups() -> None:
    m = ControllerMetrics()
    group = ReplicaInfo(
        cluster="DefaultCluster",
        broker_name="broker-a",
        master_broker_id=1,
        master_address="10.0.0.1:10911",
        master_epoch=3,
        sync_state_set=frozenset({1, 2}),
        sync_state_set_epoch=5,
        replicas=tuple(
            Replica(broker_id=i, address=f"10.0.0.{i}:10911", in_sync=i < 3) for i in (1, 2, 3)
        ),
    )
    m.refresh_groups([group])
    got = samples(m.registry)
    a = labels(broker_name="broker-a")
    assert got["rmq_controller_group_replicas"] == {a: 3.0}
    assert got["rmq_controller_group_sync_state_set_size"] == {a: 2.0}
    assert got["rmq_controller_group_master_epoch"] == {a: 3.0}
    assert got["rmq_controller_group_has_master"] == {a: 1.0}
    m.refresh_groups([])
    assert "rmq_controller_group_replicas" not in samples(m.registry)


# -- docs/metrics.md is the list ----------------------------------------------------------------


def documented_rows() -> list[str]:
    """The metric name of each row of docs/metrics.md's tables, in order."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    return re.findall(r"^\| `([a-z_]+)` \| (?:counter|gauge|histogram) \|", text, re.M)


def documented() -> set[str]:
    return set(documented_rows())


def test_docs_list_each_metric_once() -> None:
    rows = documented_rows()
    assert sorted({n for n in rows if rows.count(n) > 1}) == []


def exposed_names(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


async def test_docs_list_exactly_the_exported_metrics(broker: Broker) -> None:
    broker.ctx.ha = StandInHA()  # type: ignore[assignment]  # a master's HA figures too
    exported = exposed_names(broker.metrics.registry) | exposed_names(ControllerMetrics().registry)
    docs = documented()
    assert exported - docs == set(), "exported but not in docs/metrics.md"
    assert docs - exported == set(), "in docs/metrics.md but exported by no daemon"


async def test_metric_names_follow_prometheus_conventions(broker: Broker) -> None:
    broker.ctx.ha = StandInHA()  # type: ignore[assignment]
    families = [*broker.metrics.registry.collect(), *ControllerMetrics().registry.collect()]
    for family in families:
        name = family.name
        if name.startswith("process_"):
            continue  # prometheus_client's own
        # rmq_consumer_: figures about consumer groups, exported by the brokers (the name)
        assert re.fullmatch(r"rmq_(broker|controller|consumer)_[a-z0-9_]+", name), name
        assert not name.endswith("_total"), f"{name}: the client adds _total to counters"
        if family.type == "histogram":
            assert name.endswith(("_seconds", "_bytes")), f"{name}: a histogram needs a unit"
        if "offset" in name:
            assert name.endswith("_bytes"), f"{name}: CommitLog offsets are bytes"
        if any(word in name for word in ("latency", "duration", "fsync")):
            assert name.endswith("_seconds"), f"{name}: times are in seconds"


# -- docs/metrics.md's labels ------------------------------------------------------------------

BROKER_IDENTITY = {"cluster", "broker_name", "broker_id"}
"""On every broker series; the Labels table says so once, the metrics' rows leave them out."""


def documented_labels() -> dict[str, set[str]]:
    """metric -> the labels its row of docs/metrics.md names."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| (?:counter|gauge|histogram) \|([^|]*)\|", text, re.M)
    return {name: {x.strip() for x in cell.split(",") if x.strip()} for name, cell in rows}


def labels_table() -> dict[str, set[str]]:
    """label -> the metrics the Labels table names in its row's "on" column (none when the
    column says it in words only, such as "every broker series")."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    table = text[text.index("## Labels") : text.index("## Broker")]
    out: dict[str, set[str]] = {}
    for names, on in re.findall(r"^\| ([^|]+) \| ([^|]+) \|", table, re.M):
        for label in re.findall(r"`([a-z_]+)`", names):
            out.setdefault(label, set()).update(re.findall(r"`(rmq_[a-z_]+)`", on))
    return out


def exported_labels(registry: CollectorRegistry) -> dict[str, set[str]]:
    """metric -> its label names: declared, for prometheus_client's own metrics; read off the
    samples, for our collectors (one that has no sample yet, such as a per-topic counter before
    any traffic, is left out)."""
    out: dict[str, set[str]] = {}
    for collector in list(registry._collector_to_names):  # no public listing
        declared = getattr(collector, "_labelnames", None)
        if declared is not None:
            kind = getattr(collector, "_type")  # noqa: B009  # prometheus_client's private
            name = getattr(collector, "_name") + ("_total" if kind == "counter" else "")  # noqa: B009
            out[name] = set(declared)
            continue
        for family in collector.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            seen = {label for s in family.samples for label in s.labels if label != "le"}
            if family.samples:
                out.setdefault(name, set()).update(seen)
    return out


def test_the_labels_table_describes_every_label_a_metric_carries() -> None:
    table = labels_table()
    rows = documented_labels()
    for metric, labels in rows.items():
        missing = labels - table.keys()
        assert not missing, f"{metric}: {sorted(missing)} not in docs/metrics.md's Labels table"
    for label, metrics in table.items():
        for metric in metrics:
            assert metric in rows, f"the Labels table names {metric}, which has no row"
            assert label in rows[metric], f"the Labels table says {metric} has {label}"


async def test_each_rows_labels_are_the_exported_ones(broker: Broker) -> None:
    broker.ctx.ha = StandInHA()  # type: ignore[assignment]  # a master's HA figures too
    docs = documented_labels()
    exported = exported_labels(broker.metrics.registry)
    controller = exported_labels(ControllerMetrics().registry)
    assert len(exported) + len(controller) > 60  # most of both daemons' metrics are read
    for name, labels in exported.items():
        if name.startswith("rmq_"):
            assert labels >= BROKER_IDENTITY, name
            assert labels - BROKER_IDENTITY == docs[name], name
    for name, labels in controller.items():
        if name.startswith("rmq_"):
            assert labels == docs[name], name
