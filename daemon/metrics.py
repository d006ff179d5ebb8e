"""The Prometheus endpoint: ``/metrics`` on the metrics port, served from a thread."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, disable_created_metrics, start_http_server


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int | None:
    """Serve ``registry`` on ``host:port``; port 0 turns metrics off. Returns the bound port.

    The daemon's counters and histograms are served without prometheus_client's
    ``<name>_created`` series (the time each series was first touched): Prometheus's text format
    ingests them as one extra gauge per counter series, doubling what every scrape stores, and
    nothing in docs/metrics.md, the alerts or the dashboard reads them.
    """
    if port == 0:
        return None
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
