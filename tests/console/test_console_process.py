"""rmq-console as a process, without a browser: HTTPS on its own listener when configured, and
a cluster that cannot be reached is a page saying so (502), never a stack trace."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.console.browser import console_process
from tests.deploy.test_prometheus_e2e import Prometheus
from tests.support.procs import free_port, port_open
from tests.support.tls import make_ca
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def test_https_listener_and_an_unreachable_cluster_is_a_page(tmp_path: Path) -> None:
    pki = make_ca(tmp_path / "pki")
    cert, key = pki.issue("console")
    nobody = f"127.0.0.1:{free_port()}"  # no controller listens there
    config = tmp_path / "console.toml"
    config.write_text(
        f'controllers = "{nobody}"\ntls_cert_file = "{cert}"\ntls_key_file = "{key}"\n'
        "request_timeout = 1.0\n"
    )
    console, port = console_process(tmp_path, "--config", str(config))
    console.start()
    try:
        wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)
        context = ssl.create_default_context(cafile=str(pki.ca))
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(
                f"https://127.0.0.1:{port}/c/default/cluster", context=context, timeout=30
            )
        page = failed.value.read().decode()
        assert failed.value.code == 502
        assert "no controller answered" in page and nobody in page
        assert "Traceback" not in page
        cookie = failed.value.headers["Set-Cookie"]
        assert "rmq_console_csrf=" in cookie and "Secure" in cookie and "HttpOnly" in cookie
        # Plain HTTP to the HTTPS listener gets no page.
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/c/default/cluster", timeout=10)
    finally:
        console.stop()
    assert "Traceback" not in console.log()


def test_an_unreachable_cluster_page_shows_what_prometheus_says(tmp_path: Path) -> None:
    """The cluster cannot be reached, Prometheus can: the error page lists its alerts (here
    the production rules' RmqNoActiveController, pending: Prometheus scrapes no controller)."""
    prometheus = Prometheus(tmp_path, [], [])
    nobody = f"127.0.0.1:{free_port()}"
    console, port = console_process(
        tmp_path, "--controllers", nobody, "--prometheus-url", f"http://127.0.0.1:{prometheus.port}"
    )
    prometheus.start()
    console.start()
    try:
        wait_until(prometheus.ready, "Prometheus ready", 60, on_timeout=prometheus.log)
        wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)

        def error_page() -> str:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/c/default/cluster", timeout=30)
            except urllib.error.HTTPError as exc:
                assert exc.code == 502
                return str(exc.read().decode())
            raise AssertionError("the cluster page of an unreachable cluster answered 200")

        def pending() -> str:
            page = error_page()
            return page if "pending" in page else ""

        page = wait_until(
            pending,
            "the rule pending on the error page",
            60,
            on_timeout=prometheus.log,
        )
        assert "no controller answered" in page and nobody in page
        assert f"Prometheus http://127.0.0.1:{prometheus.port}" in page
        assert "1 more pending" in page and "Traceback" not in page
    finally:
        console.stop()
        prometheus.stop()
