"""deploy/prometheus and deploy/grafana, checked statically: promtool check/test, scrape targets
against the example layout, every alert unit-tested and explained, every metric name real."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from controller.config import ControllerConfig
from tests.deploy.support import load_example, make_security_files, require_tool

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULES = PROM / "rules" / "rmq-alerts.yml"
RULE_TESTS = PROM / "rules" / "rmq-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "rmq-cluster.json"
OPERATIONS = ROOT / "docs" / "operations.md"
METRICS_DOC = ROOT / "docs" / "metrics.md"


def promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    binary = require_tool("promtool", "prometheus")
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = RULES.read_text().count("- alert: ")
    assert alerts >= 12  # the alerts docs/operations.md has a runbook section for, at least
    assert f"SUCCESS: {alerts} rules found" in result.stdout


@pytest.mark.parametrize("config", ["prometheus.yml", "prometheus-local.yml"])
def test_promtool_check_config(config: str) -> None:
    result = promtool("check", "config", config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules() -> None:
    result = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_fails_when_a_rule_changes(tmp_path: Path) -> None:
    """The unit tests pin the thresholds: a looser lag bound makes them fail."""
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    rules = RULES.read_text()
    assert "> 128 * 1024 * 1024" in rules
    (tmp_path / RULES.name).write_text(rules.replace("> 128 * 1024 * 1024", "> 512 * 1024 * 1024"))
    result = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert result.returncode != 0 and "RmqSlaveLagHigh" in result.stdout + result.stderr


def alert_rules() -> list[dict[str, str]]:
    """Each alert's name, expr, severity and runbook, read from our own layout of the file
    (``- alert:`` blocks; expr up to ``for:``). PyYAML is not a dependency; the real Prometheus
    test reads the same rules back through the HTTP API."""
    out = []
    for block in RULES.read_text().split("- alert: ")[1:]:
        name = block.split("\n", 1)[0].strip()
        expr = re.search(r"expr: (?:>-)?(.*?)\n\s+for:", block, re.S)
        severity = re.search(r"severity: (\w+)", block)
        runbook = re.search(r"runbook: (\S+)", block)
        assert expr and severity and runbook, f"{name}: expr, severity and runbook are required"
        out.append(
            {
                "alert": name,
                "expr": " ".join(expr.group(1).split()),
                "severity": severity.group(1),
                "runbook": runbook.group(1),
            }
        )
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_fires_in_a_unit_test_and_has_a_runbook_section() -> None:
    tests = RULE_TESTS.read_text()
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.M)}
    for rule in alert_rules():
        name = rule["alert"]
        fired = re.search(rf"alertname: {name}\n\s+eval_time: \S+\n\s+exp_alerts:", tests)
        assert fired, f"{name}: no promtool test expects it to fire"
        assert rule["severity"] in ("warning", "critical"), name
        anchor = rule["runbook"].split("#", 1)[1]
        assert anchor in anchors, f"{name}: docs/operations.md has no section #{anchor}"


def metric_names(text: str) -> set[str]:
    return set(re.findall(r"\b((?:rmq|process)_[a-z0-9_]+?)(?:_bucket)?\b", text))


def documented_metrics() -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)` \|", METRICS_DOC.read_text(), re.M))


def test_rules_and_dashboard_use_only_documented_metrics() -> None:
    documented = documented_metrics()
    expressions = [rule["expr"] for rule in alert_rules()]
    expressions += dashboard_expressions()
    for expr in expressions:
        unknown = metric_names(expr) - documented
        assert not unknown, f"not in docs/metrics.md: {sorted(unknown)} (in {expr})"


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_is_a_well_formed_grafana_model() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "cluster"} <= variables
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["refId"] and target["expr"], panel["title"]
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= variables, f"{panel['title']}: unknown variable {used - variables}"
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("master", "epoch", "syncstateset", "produce", "consume", "latency", "lag"):
        assert topic in titles, f"no panel about {topic}"
    assert "controller term and leader" in titles


def scrape_targets(path: Path) -> dict[str, set[str]]:
    """{job: targets} of one of our scrape configs (each job's targets quoted host:port)."""
    jobs = {}
    for block in path.read_text().split("- job_name: ")[1:]:
        name = block.split("\n", 1)[0].strip()
        jobs[name] = set(re.findall(r'"([\w.\-]+:\d+)"', block))
    return jobs


def test_production_scrape_targets_are_the_example_layout(tmp_path: Path) -> None:
    security = make_security_files(tmp_path / "etc-rmq")
    controllers, brokers = set(), set()
    for path in (ROOT / "deploy" / "config").glob("host*/*.toml"):
        if path.stem.startswith("broker-"):
            b = load_example(BrokerConfig, path, security)
            brokers.add(f"{b.listen_host}:{b.metrics_port}")
        else:
            c = load_example(ControllerConfig, path, security)
            controllers.add(f"{c.host}:{c.metrics_port}")
    assert len(controllers) == 3 and len(brokers) == 6
    expected = {"rmq-controller": controllers, "rmq-broker": brokers}
    assert scrape_targets(PROM / "prometheus.yml") == expected
    assert "rule_files:\n  - rules/rmq-alerts.yml\n" in (PROM / "prometheus.yml").read_text()
