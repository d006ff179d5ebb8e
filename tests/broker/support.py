"""Helpers shared by the broker tests."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.broker import Broker


def figure(b: Broker, name: str, **labels: str) -> float:
    """The sum of ``b``'s samples named ``name`` whose labels include ``labels``, as a scrape
    of its /metrics reads them."""
    text = generate_latest(b.metrics.registry).decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total
