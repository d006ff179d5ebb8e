"""Reading a daemon's /metrics in tests: the port a test gave it, the text, one counter's
values by ``reason``, and the consumer groups' lag."""

from __future__ import annotations

import re
import urllib.request

from tests.support.cluster import BrokerNode

__all__ = ["by_reason", "group_lag", "metrics_port", "scrape"]


def metrics_port(node: BrokerNode) -> int:
    """The port the test gave ``node`` (the last --metrics-port on its command line wins)."""
    last = len(node.argv) - 1 - node.argv[::-1].index("--metrics-port")
    return int(node.argv[last + 1])


def scrape(port: int) -> str:
    """The /metrics text served on ``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def by_reason(text: str, metric: str) -> dict[str, float]:
    """reason -> value of each ``metric{...reason="..."...}`` sample in ``text``."""
    out = {}
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            reason = re.search(r'reason="([a-z_]+)"', line)
            assert reason, line
            out[reason.group(1)] = float(line.rsplit(" ", 1)[1])
    return out


def group_lag(text: str) -> dict[tuple[str, str], float]:
    """(group, topic) -> ``rmq_consumer_group_lag`` in ``text``."""
    out = {}
    for line in text.splitlines():
        if line.startswith("rmq_consumer_group_lag{"):
            group = re.search(r'group="([^"]*)"', line)
            topic = re.search(r'topic="([^"]*)"', line)
            assert group and topic, line
            out[(group.group(1), topic.group(1))] = float(line.rsplit(" ", 1)[1])
    return out
