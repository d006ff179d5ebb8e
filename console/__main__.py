"""``rmq-console``: the operators' web console (docs/console.md)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import structlog
import uvicorn

from client.credentials import CredentialsFileError, read_credentials_file
from console.app import make_app
from console.config import ConsoleConfig, Settings, load_config
from daemon import cli as daemon_cli
from daemon.auth_key import load_auth_key
from daemon.config import ConfigError
from daemon.logs import setup_logging
from daemon.signals import run
from protocol.request_auth import cluster_credentials
from remoting.client import use_credentials, use_tls
from remoting.tls import TlsError, client_context


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the console stops as every daemon does
    (:func:`daemon.cli.serve_until_stopped`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Console:
    """The web listener as a daemon: started, reloaded (nothing to read again), stopped."""

    def __init__(self, settings: Settings) -> None:
        cfg = settings.config
        self.cfg = cfg
        self.settings = settings
        self.server = _Server(
            uvicorn.Config(
                make_app(settings),
                log_config=None,
                # Its start and stop lines are the console's own (structlog); warnings and
                # errors still show.
                log_level="warning",
                access_log=False,
                ssl_certfile=str(cfg.tls_cert_file) if cfg.tls_cert_file else None,
                ssl_keyfile=str(cfg.tls_key_file) if cfg.tls_key_file else None,
                lifespan="off",
            )
        )
        self.task: asyncio.Task[None] | None = None
        self.port = cfg.port

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.cfg.host else socket.AF_INET
        sock = socket.create_server((self.cfg.host, self.cfg.port), family=family)
        self.port = sock.getsockname()[1]
        self.task = asyncio.ensure_future(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self.task.done():
                self.task.result()
                raise RuntimeError("the web server stopped while starting")
            await asyncio.sleep(0.05)

    @property
    def url(self) -> str:
        scheme = "https" if self.cfg.tls_cert_file else "http"
        host = self.cfg.host if ":" not in self.cfg.host else f"[{self.cfg.host}]"
        return f"{scheme}://{host}:{self.port}/"

    def reload(self) -> None:
        pass

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)


async def serve(settings: Settings) -> int:
    log = structlog.get_logger("console")
    console = Console(settings)
    try:
        await console.start()
    except OSError as exc:
        click.echo(
            f"rmq-console: cannot listen on {settings.config.listen}: {exc.strerror}", err=True
        )
        return 1
    except Exception as exc:
        return await daemon_cli.start_failed(log, "console", console, exc)
    log.info("console serving", url=console.url, clusters=settings.clusters)
    signal_name = await daemon_cli.serve_until_stopped(console, f"serving on {console.url}")
    log.info("stopping", signal=signal_name)
    await console.stop()
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@daemon_cli.config_option
@click.option(
    "--controllers",
    metavar="ADDRS",
    help="Controller addresses, ';'-separated, of the cluster shown as 'default' (the config "
    "file's [clusters] table names more).",
)
@click.option("--listen", metavar="HOST:PORT", help="The web listener (default 127.0.0.1:8080).")
@click.option(
    "--auth-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Sign as the cluster itself with its auth key (as rmqctl --auth-key-file).",
)
@click.option(
    "--cluster-ca-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Connect to the clusters over TLS, their certificates chaining to this PEM CA.",
)
@click.option(
    "--cluster-cert-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="PEM client certificate for clusters that ask for one (with --cluster-key-file).",
)
@click.option(
    "--cluster-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="PEM private key of --cluster-cert-file.",
)
@click.option(
    "--credentials-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="access_key and secret_key (TOML, mode 600) to sign requests with on a cluster with "
    "authentication on.",
)
@click.option(
    "--login",
    is_flag=True,
    default=None,
    help="Log in with the cluster's own users (its authentication on): super users get every "
    "action, other users read only.",
)
@click.option(
    "--prometheus-url",
    metavar="URL",
    help="A Prometheus scraping the clusters: the cluster page shows the alerts firing there.",
)
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), help="Log format.")
@daemon_cli.reference_option
def main(config_file: Path | None, print_config_reference: bool, **flags: Any) -> None:
    """Run the web console: the clusters' brokers, controllers, topics and consumer groups,
    read and changed through the controllers and brokers as rmqctl does."""
    if print_config_reference:
        daemon_cli.print_reference(ConsoleConfig)
        return
    try:
        settings = load_config(config_file, flags)
        cfg = settings.config
        if cfg.credentials_file is not None:
            use_credentials(read_credentials_file(cfg.credentials_file))
        if cfg.auth_key_file is not None:
            try:
                use_credentials(cluster_credentials(load_auth_key(cfg.auth_key_file)))
            except ValueError as exc:
                raise ConfigError(f"config key 'auth_key_file': {exc}") from None
        if cfg.cluster_tls or cfg.cluster_ca_file is not None or cfg.cluster_cert_file is not None:
            use_tls(
                client_context(cfg.cluster_ca_file, cfg.cluster_cert_file, cfg.cluster_key_file)
            )
    except (ConfigError, CredentialsFileError) as exc:
        click.echo(f"rmq-console: {exc}", err=True)
        sys.exit(2)
    except TlsError as exc:
        click.echo(f"rmq-console: the clusters' TLS files: {exc}", err=True)
        sys.exit(2)
    setup_logging(cfg.log_format, cfg.log_level)
    sys.exit(run(lambda: serve(settings)))


if __name__ == "__main__":
    main()
