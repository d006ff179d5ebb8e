"""The broker's metrics read from the broker when the registry is collected (on the scrape
thread), not counted as things happen: role, fencing, disk usage, corruption, replication lag
(:class:`StateCollector`), consumer group lag (:class:`ConsumerLagCollector`), and the identity
labels put on every series (:class:`WithIdentity`).

The broker hands :meth:`broker.metrics.BrokerMetrics.bind` its callbacks
(:class:`BrokerReadings`): this module knows no broker object, only what each callback returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from broker.ha.slave_client import SlaveState
from broker.role import RoleState
from storage.retention import disk_usage


class ReplicationView(Protocol):
    """What the scrape reads from the broker's HA service."""

    @property
    def confirm_offset(self) -> int: ...
    @property
    def slave_state(self) -> SlaveState | None: ...
    def slave_acks(self) -> dict[int, int]: ...
    def in_sync_members(self) -> frozenset[int]: ...
    def refused_counts(self) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerReadings:
    """The broker's figures, each read by a callback when the registry is collected (on the
    scrape thread, while the loop thread may change them: each is read once per scrape)."""

    role: Callable[[], RoleState]
    assigned_ids: bool
    """Controller mode: broker ids come from the controllers (below 1: not known yet)."""
    data_dir: Path
    corruption: Callable[[], Mapping[str, int]]
    max_offset: Callable[[], int]
    replication: Callable[[], ReplicationView | None]
    """The HA service (controller mode), or None."""
    consumer_lag: Callable[[], Mapping[tuple[str, str], int] | None] = lambda: None
    """(consumer group, topic) -> messages not consumed yet; None: export no series."""


class Scraped(Protocol):
    """What the collectors read of :class:`broker.metrics.BrokerMetrics`."""

    @property
    def cluster(self) -> str: ...
    @property
    def broker_name(self) -> str: ...
    @property
    def readings(self) -> BrokerReadings | None: ...
    def broker_id(self) -> str: ...


class StateCollector(Collector):
    """Role, fencing, replication lag and disk usage, read from the broker at scrape time."""

    def __init__(self, metrics: Scraped) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        readings = self._m.readings
        if readings is None:
            return
        role_now = readings.role()  # one frozen value: every figure below from the same role
        names = ["cluster", "broker_name"]
        base = [self._m.cluster, self._m.broker_name]
        role = GaugeMetricFamily(
            "rmq_broker_role",
            "1 for this broker's current role: master, slave, or none (no master known yet)",
            labels=[*names, "role"],
        )
        for name in ("master", "slave", "none"):
            role.add_metric([*base, name], 1.0 if name == role_now.name else 0.0)
        yield role
        yield _single(
            "rmq_broker_master_epoch",
            "Master epoch this broker is master of, or follows as a slave",
            names,
            base,
            float(role_now.master_epoch),
        )
        yield _single(
            "rmq_broker_fenced",
            "1 while this master refuses writes because it lost the active controller",
            names,
            base,
            1.0 if role_now.is_master and role_now.fenced else 0.0,
        )
        try:
            usage = disk_usage(readings.data_dir)
        except OSError:
            pass  # no data directory (yet): the series are absent rather than the scrape failing
        else:
            yield _single(
                "rmq_broker_disk_used_ratio",
                "Used fraction of the file system holding the data directory (retention's measure)",
                names,
                base,
                usage.used_ratio,
            )
            yield _single(
                "rmq_broker_disk_size_bytes",
                "Size of the file system holding the data directory",
                names,
                base,
                float(usage.total_bytes),
            )
        corrupt = CounterMetricFamily(
            "rmq_broker_corrupt_data",
            "Corrupt data found in the store, by kind (see docs/metrics.md)",
            labels=[*names, "kind"],
        )
        for kind, count in readings.corruption().items():
            corrupt.add_metric([*base, kind], float(count))
        yield corrupt
        ha = readings.replication()
        if ha is None:
            return
        lag = GaugeMetricFamily(
            "rmq_broker_ha_slave_lag_bytes",
            "On a master: CommitLog bytes a connected slave has not acknowledged yet",
            labels=[*names, "slave_broker_id"],
        )
        max_offset = readings.max_offset()
        for slave_id, acked in sorted(_slave_acks(ha).items()):
            lag.add_metric([*base, str(slave_id)], float(max(0, max_offset - acked)))
        yield lag
        yield _single(
            "rmq_broker_ha_confirm_offset_bytes",
            "CommitLog offset every SyncStateSet member has (consumers read up to it)",
            names,
            base,
            float(ha.confirm_offset),
        )
        yield _single(
            "rmq_broker_ha_replication_refused",
            "On a slave: 1 while it refuses its master's history (nothing in common, or a cut "
            "below its confirm offset) and replicates nothing",
            names,
            base,
            1.0 if ha.slave_state is SlaveState.SUSPENDED else 0.0,
        )
        yield _single(
            "rmq_broker_ha_sync_state_set_size",
            "On a master: members of the SyncStateSet it last had accepted (0 on a slave)",
            names,
            base,
            float(len(ha.in_sync_members())),
        )
        refused = CounterMetricFamily(
            "rmq_broker_ha_refused",
            "HA peers this broker refused as master and disconnected, by reason (see "
            "docs/metrics.md)",
            labels=[*names, "reason"],
        )
        for reason, count in ha.refused_counts().items():
            refused.add_metric([*base, reason], float(count))
        yield refused


class ConsumerLagCollector(Collector):
    """``rmq_consumer_group_lag``: one series per (group, topic) this master holds offsets or
    members for, computed when scraped (see broker.consumer_stats)."""

    def __init__(self, metrics: Scraped) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        readings = self._m.readings
        lags = readings.consumer_lag() if readings is not None else None
        if lags is None:
            return
        family = GaugeMetricFamily(
            "rmq_consumer_group_lag",
            "Messages a consumer group has not consumed yet on this master, summed over the "
            "topic's queues (what rmqctl consumerProgress shows)",
            labels=["cluster", "broker_name", "group", "topic"],
        )
        base = [self._m.cluster, self._m.broker_name]
        for (group, topic), lag in sorted(lags.items()):
            family.add_metric([*base, group, topic], float(lag))
        yield family


def _single(name: str, doc: str, names: list[str], values: list[str], value: float) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=names)
    family.add_metric(values, value)
    return family


def _slave_acks(ha: ReplicationView) -> dict[int, int]:
    """The master's per-slave acks, read from the scrape thread while the loop may change them:
    a concurrent change shows as RuntimeError (dict changed size); read again."""
    for _ in range(3):
        try:
            return dict(ha.slave_acks())
        except RuntimeError:
            time.sleep(0)
    return {}


class WithIdentity(Collector):
    """Every family of ``inner`` with the broker's identity labels (``cluster``,
    ``broker_name``, ``broker_id``) on every sample, the id read at collection time."""

    def __init__(self, inner: CollectorRegistry, metrics: Scraped) -> None:
        self._inner = inner
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        identity = {"cluster": self._m.cluster, "broker_name": self._m.broker_name}
        broker_id = self._m.broker_id()
        for family in self._inner.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [
                s._replace(labels={**identity, **s.labels, "broker_id": broker_id})
                for s in family.samples
            ]
            yield out
