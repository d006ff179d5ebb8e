"""A real Prometheus scraping a real cluster, with deploy/prometheus/rules/rmq-alerts.yml loaded.

The cluster is laid out like ``make run`` (three controllers, broker group broker-a of three
replicas) on ephemeral ports; Prometheus (Debian's package) scrapes it every second and
evaluates the production alert rules every second. Through Prometheus's HTTP query API the test
sees: every target up, the master epoch, a produce rate while rmqctl sends; every alert rule
loaded and healthy and every dashboard expression valid; after kill -9 of the master, a higher
master epoch; after killing the other replicas too, the group-without-master alert pending.

Skips only where Prometheus is not installed and cannot be (not in CI, where .ci/run installs it:
there a missing binary fails the test).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.support import require_tool
from tests.support.procs import Daemon, free_port, port_open, small_segments_config
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules" / "rmq-alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "rmq-cluster.json"
BIN = Path(sys.executable).parent
TOPIC = "PromE2E"
GROUP = "broker-a"

pytestmark = pytest.mark.multiprocess


def prometheus_binary() -> str:
    return require_tool("prometheus", "prometheus")


class Prometheus(Daemon):
    def __init__(self, tmp: Path, controllers: list[int], brokers: list[int]) -> None:
        self.port = free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: rmq-controller
    static_configs:
      - targets: {json.dumps([f"127.0.0.1:{p}" for p in controllers])}
  - job_name: rmq-broker
    static_configs:
      - targets: {json.dumps([f"127.0.0.1:{p}" for p in brokers])}
"""
        )
        argv = [
            prometheus_binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        super().__init__("prometheus", argv, tmp / "prometheus.log")

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as exc:  # 400/422: a bad expression, with the reason
            doc = json.load(exc)
        if doc.get("status") != "success":
            raise AssertionError(f"{path} {params}: {doc.get('error')}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def scalar(self, expr: str) -> float | None:
        """The value of a one-element result, None when empty."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False


class Cluster:
    """Three controllers and one broker group of three replicas, metrics on ephemeral ports."""

    def __init__(self, tmp: Path) -> None:
        ports = [free_port() for _ in range(3)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        self.addresses = ";".join(f"127.0.0.1:{p}" for p in ports)
        self.controllers: list[tuple[Daemon, int, int]] = []  # daemon, port, metrics port
        for i, port in enumerate(ports):
            metrics = free_port()
            argv = [
                str(BIN / "rmq-controller"),
                "--id", f"n{i}",
                "--peers", peers,
                "--data-dir", str(tmp / f"controller-n{i}"),
                "--metrics-port", str(metrics),
                "--log-format", "json",
            ]  # fmt: skip
            log = tmp / f"controller-n{i}.log"
            self.controllers.append((Daemon(f"controller-n{i}", argv, log), port, metrics))
        self.brokers: dict[int, tuple[Daemon, int]] = {}  # metrics port -> daemon, port
        for i in range(3):
            port, ha, metrics = free_port(), free_port(), free_port()
            argv = [
                str(BIN / "rmq-broker"),
                "--config", str(small_segments_config(tmp, f"{GROUP}-{i}")),
                "--broker-name", GROUP,
                "--listen", f"127.0.0.1:{port}",
                "--ha-port", str(ha),
                "--controllers", self.addresses,
                "--data-dir", str(tmp / f"{GROUP}-{i}"),
                "--metrics-port", str(metrics),
                "--log-format", "json",
                # No gRPC endpoint: its default, listen port + 2, is no port free_port handed
                # out, and another daemon of this test was given it (CI: 'gRPC port
                # 127.0.0.1:23820: Failed to bind', broker-a-2 exited early).
                "--grpc-listen", "0",
            ]  # fmt: skip
            self.brokers[metrics] = (Daemon(f"{GROUP}-{i}", argv, tmp / f"{GROUP}-{i}.log"), port)

    def daemons(self) -> list[tuple[Daemon, int]]:
        return [(d, p) for d, p, _ in self.controllers] + list(self.brokers.values())

    def start(self) -> None:
        for d, _port in self.daemons():
            d.start()
        for d, port in self.daemons():
            wait_until(
                lambda d=d, port=port: listening(d, port), f"{d.name} to listen", 60, interval=0.1
            )

    def stop(self) -> None:
        for d, _port in reversed(self.daemons()):
            d.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {d.name}\n{d.log()[-2000:]}" for d, _ in self.daemons())


def listening(d: Daemon, port: int) -> bool:
    if not d.alive():
        raise AssertionError(f"{d.name} exited early:\n{d.log()[-3000:]}")
    return port_open(port)


class Producer:
    """rmqctl sendMessage in a loop on a thread, until stopped."""

    def __init__(self, addresses: str) -> None:
        self.addresses = addresses
        self.sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="producer", daemon=True)

    def run(self) -> None:
        argv = [str(BIN / "rmqctl"), "-a", self.addresses, "sendMessage", "-t", TOPIC]
        while not self.stopping.is_set():
            done = subprocess.run(
                [*argv, "-p", "hello", "--count", "50"], capture_output=True, timeout=60
            )
            if done.returncode == 0:
                self.sent += 50
            else:
                self.stopping.wait(0.2)  # a failover in progress: the next round retries

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.ident is not None:  # started: the scenario may fail before it starts
            self.thread.join(timeout=70)


ACTIVE = "and on (instance) (rmq_controller_active == 1)"


def alert_expr(rules: list[dict[str, Any]], name: str) -> str:
    (rule,) = [r for r in rules if r.get("name") == name and r["type"] == "alerting"]
    return str(rule["query"])


def dashboard_queries() -> Iterator[tuple[str, str]]:
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "10s").replace("$cluster", ".*")
            yield panel["title"], expr


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_prometheus_sees_the_cluster_and_a_failover(tmp_path: Path, cluster: Cluster) -> None:
    prom = Prometheus(tmp_path, [m for _, _, m in cluster.controllers], list(cluster.brokers))
    producer = Producer(cluster.addresses)
    try:
        prom.start()
        wait_until(
            lambda: listening(prom, prom.port) and prom.ready(),
            "prometheus to be ready",
            60,
            interval=0.5,
        )
        run_scenario(prom, cluster, producer)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n{cluster.logs()}\n--- prometheus\n{prom.log()[-3000:]}"
        ) from exc
    finally:
        producer.stop()
        prom.stop()


def run_scenario(prom: Prometheus, cluster: Cluster, producer: Producer) -> None:
    # Every daemon is scraped and up.
    def all_up() -> bool:
        series = prom.query('up{job=~"rmq-controller|rmq-broker"}')
        return len(series) == 6 and all(s["value"][1] == "1" for s in series)

    def scrapes() -> str:
        up = prom.query('up{job=~"rmq-controller|rmq-broker"}')
        took = prom.query('scrape_duration_seconds{job=~"rmq-controller|rmq-broker"}')
        targets = prom.api("targets")["activeTargets"]
        return "\n".join(
            [f"up {s['metric']['instance']} {s['value'][1]}" for s in up]
            + [f"scrape took {s['metric']['instance']} {s['value'][1]} s" for s in took]
            + [f"target {t['scrapeUrl']} {t['health']} {t['lastError']!r}" for t in targets]
        )

    wait_until(all_up, "all six targets up", 60, interval=0.5, on_timeout=scrapes)

    # A master was elected: its epoch, as the active controller reports it.
    epoch_expr = f'max(rmq_controller_group_master_epoch{{broker_name="{GROUP}"}} {ACTIVE})'
    first_epoch = wait_until(lambda: prom.scalar(epoch_expr), "a master epoch", 60, interval=0.5)
    assert first_epoch >= 1

    # Produce: the rate shows up.
    create = subprocess.run(
        [str(BIN / "rmqctl"), "-a", cluster.addresses, "updateTopic", "-t", TOPIC, "-q", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert create.returncode == 0, create.stderr
    producer.thread.start()
    rate_expr = f'sum(rate(rmq_broker_messages_in_total{{topic="{TOPIC}"}}[5s]))'
    wait_until(lambda: (prom.scalar(rate_expr) or 0) > 0, "a produce rate", 60, interval=0.5)

    # The production rules are loaded and evaluate cleanly; the dashboard's queries are valid.
    def rules_healthy() -> list[dict[str, Any]] | None:
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        every = len(rules) == RULES.read_text().count("- alert: ")
        return rules if every and all(r["health"] == "ok" for r in rules) else None

    rules = wait_until(rules_healthy, "every alert rule loaded and healthy", 30, interval=0.5)
    for title, expr in dashboard_queries():
        prom.query(expr)  # raises with Prometheus's reason on a bad expression
        assert title
    # No broker-group alert while the group is healthy.
    no_master = alert_expr(rules, "RmqBrokerGroupWithoutMaster")
    assert prom.query(no_master) == []

    # The slaves catch up and join the SyncStateSet; the master reports their lag.
    in_sync = f'max(rmq_controller_group_sync_state_set_size{{broker_name="{GROUP}"}} {ACTIVE})'
    wait_until(lambda: prom.scalar(in_sync) == 3, "a SyncStateSet of three", 90, interval=0.5)
    wait_until(
        lambda: len(prom.query("rmq_broker_ha_slave_lag_bytes")) == 2,
        "lag of two slaves",
        30,
        interval=0.5,
    )

    # kill -9 the master: another replica takes over with a higher epoch.
    master = wait_until(
        lambda: prom.query('rmq_broker_role{role="master"} == 1'), "one master", 30, interval=0.5
    )
    assert len(master) == 1, master
    master_metrics_port = int(master[0]["metric"]["instance"].rpartition(":")[2])
    killed, _ = cluster.brokers[master_metrics_port]
    killed.kill9()
    wait_until(
        lambda: (prom.scalar(epoch_expr) or 0) > first_epoch,
        "a higher master epoch after the failover",
        60,
        interval=0.5,
    )
    # The killed master's last sample lingers until its next failed scrape: ask for another.
    old = master[0]["metric"]["instance"]
    wait_until(
        lambda: prom.query(f'rmq_broker_role{{role="master",instance!="{old}"}} == 1'),
        "a new master on another replica",
        30,
        interval=0.5,
    )

    # Kill the other replicas too: no SyncStateSet member is left, the group has no master and
    # the alert's own expression returns it; the alert goes pending (then firing after 30 s).
    for d, _port in cluster.brokers.values():
        d.kill9()
    wait_until(
        lambda: [s["metric"] for s in prom.query(no_master)] == [{"broker_name": GROUP}],
        "the group-without-master expression to return broker-a",
        60,
        interval=0.5,
    )
    alert = f'ALERTS{{alertname="RmqBrokerGroupWithoutMaster",broker_name="{GROUP}"}}'
    pending = wait_until(
        lambda: prom.query(alert), "the alert to be pending or firing", 30, interval=0.5
    )
    assert pending[0]["metric"]["alertstate"] in ("pending", "firing")
    assert pending[0]["metric"]["severity"] == "critical"
    assert producer.sent > 0, "rmqctl sendMessage never succeeded"
