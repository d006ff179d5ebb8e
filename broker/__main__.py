"""``rmq-broker``: the broker daemon."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click
import structlog

from broker.config import BrokerConfig
from daemon import cli as daemon_cli
from daemon import systemd

load_config = functools.partial(daemon_cli.load_config, BrokerConfig)


async def serve(cfg: BrokerConfig, config_file: Path | None = None) -> int:
    from broker.broker import Broker, StartRefused
    from remoting.ports import PortUnavailable

    log = structlog.get_logger("broker")
    try:
        broker = Broker(cfg, config_file)
    except StartRefused as exc:
        click.echo(f"rmq-broker: cannot start: {exc}", err=True)
        return 2
    try:
        await broker.start()
    except PortUnavailable as exc:
        # One line; not exit 2: the port may be free again when systemd restarts the broker.
        click.echo(f"rmq-broker: cannot start: {exc}", err=True)
        await broker.stop()
        return 1
    except StartRefused as exc:
        # One line, no traceback, exit 2 like a config error: the operator must act.
        click.echo(f"rmq-broker: cannot start: {exc}", err=True)
        await broker.stop()
        return 2
    except Exception as exc:
        return await daemon_cli.start_failed(log, "broker", broker, exc)
    serving = f"serving {cfg.broker_name} on {cfg.listen_host}:{broker.port}"
    sig = await daemon_cli.serve_until_stopped(broker, serving)
    log.info("stopping", signal=sig)
    systemd.stopping(f"stopping on {sig}")
    await broker.stop()
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@daemon_cli.config_option
@click.option("--cluster", help="Cluster name.")
@click.option("--broker-name", help="Broker group name.")
@click.option("--listen", help="host:port serving clients.")
@click.option(
    "--grpc-listen",
    help="host:port serving the official RocketMQ 5 clients' gRPC protocol in plaintext "
    "(default: listen port + 2); 0 turns it off; off with tls_enabled unless the TOML key "
    "grpc_plaintext_with_tls is true.",
)
@click.option(
    "--grpc-tls-listen",
    help="host:port serving the gRPC protocol over TLS (with --tls-cert and --tls-key).",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    help="PEM certificate chain of the gRPC TLS port, and of every port with tls_enabled "
    "(TOML keys tls_enabled, tls_ca_file, tls_verify_client; SIGHUP reloads them).",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path, dir_okay=False),
    help="PEM private key of --tls-cert.",
)
@click.option("--ha-port", type=int, help="Port serving slaves (default: listen port + 1).")
@click.option(
    "--controllers", help="Controller addresses, ';'-separated; none: run alone as master."
)
@click.option(
    "--data-dir", type=click.Path(path_type=Path, file_okay=False), help="Store directory."
)
@click.option("--metrics-port", type=int, help="Prometheus /metrics port; 0 turns it off.")
@click.option("--election-priority", type=int, help="Lower wins among equally up-to-date replicas.")
@click.option("--flush", type=click.Choice(["async", "sync"]), help="Flush mode.")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), help="Log format.")
@daemon_cli.reference_option
def main(config_file: Path | None, print_config_reference: bool, **flags: Any) -> None:
    """Run a broker: CommitLog and ConsumeQueues, serving producers and consumers."""
    # The broker names its config file (getBrokerConfig) and never writes it: live changes
    # (rmqctl updateBrokerConfig) are kept in its data directory (broker/live_config.py).
    run = functools.partial(serve, config_file=config_file)
    daemon_cli.main("rmq-broker", BrokerConfig, config_file, print_config_reference, flags, run)


if __name__ == "__main__":
    main()
