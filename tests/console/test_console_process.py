"""rmq-console as a process, without a browser: HTTPS on its own listener when configured, and
a cluster that cannot be reached is a page saying so (502), never a stack trace; a cluster
whose controllers answer while no broker is registered has its group and topic pages say so
(200)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from client import Producer
from tests.console.browser import console_process, fetch
from tests.deploy.test_prometheus_e2e import Prometheus
from tests.support.cli import rmqctl_run
from tests.support.cluster import controllers_started
from tests.support.messages import consumed, create_once_registered
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


async def test_no_broker_registered_is_a_page_saying_so_not_a_502(tmp_path: Path) -> None:
    """Every broker of the only group killed: the controllers answer, no broker is registered.
    The groups page, a group's page (also an unknown group's) and its live part, and a topic's
    page answer 200 and say so: the console and the controllers did their part, this is the
    cluster's state (a 5xx would also stop htmx from swapping the live part, leaving the
    figures from before the brokers died on the page)."""
    with controllers_started(tmp_path) as cluster:
        (only,) = cluster.add_group("broker-a", 1)
        await create_once_registered(cluster, "T", 2, "topic T on broker-a")
        async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
            for i in range(4):
                await producer.send("T", f"m{i}".encode())
        await consumed(cluster, "billing", "T", 4)
        only.kill9()

        def none_registered() -> bool:
            proc = rmqctl_run("-a", cluster.controller_addresses, "--json", "clusterList")
            return proc.returncode == 0 and json.loads(proc.stdout)["clusters"] == {}

        wait_until(none_registered, "no broker registered", 60, interval=0.3)
        console, port = console_process(tmp_path, "--controllers", cluster.controller_addresses)
        console.start()
        try:
            wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)
            base = f"http://127.0.0.1:{port}/c/default"
            nobody = "no broker is registered with the controllers"
            status, page = fetch(f"{base}/groups")
            assert status == 200, page
            assert nobody in page and "None listed: see the notes below." in page
            for group in ("billing", "nobody-knows-me"):
                for url in (f"{base}/groups/{group}", f"{base}/groups/{group}/live"):
                    status, page = fetch(url)
                    assert status == 200, page
                    assert nobody in page and "known only to them" in page
                    assert "Unknown: no broker is registered" in page
            status, page = fetch(f"{base}/topics/T")
            assert status == 200, page
            assert "No broker of broker-a is registered with the controllers" in page
        finally:
            console.stop()
        assert "Traceback" not in console.log()
