"""The Prometheus endpoint: ``/metrics`` on the metrics port, served from a thread."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> int | None:
    """Serve ``registry`` on ``host:port``; port 0 turns metrics off. Returns the bound port."""
    if port == 0:
        return None
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
