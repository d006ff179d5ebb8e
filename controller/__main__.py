"""``rmq-controller``: the controller daemon (Raft member, metadata state machine, routes)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click
import structlog

from controller.config import ControllerConfig
from daemon.config import ConfigError, build, load_toml, reference
from daemon.logs import setup_logging
from daemon.signals import run, wait_for_stop_signal


def load_config(config_file: Path | None, overrides: dict[str, Any]) -> ControllerConfig:
    file_values = load_toml(config_file) if config_file else {}
    return build(ControllerConfig, file_values, overrides)


async def serve(cfg: ControllerConfig) -> int:
    from controller.app import Controller

    log = structlog.get_logger("controller")
    try:
        controller = Controller(cfg)
    except Exception as exc:  # unreadable or corrupt storage: an operator must look
        log.error("controller failed to open its storage", error=f"{type(exc).__name__}: {exc}")
        return 1
    try:
        await controller.start()
    except Exception as exc:
        log.error("controller failed to start", error=f"{type(exc).__name__}: {exc}")
        await controller.stop()
        return 1
    stop = asyncio.ensure_future(wait_for_stop_signal())
    failed = controller.driver.failure
    waiting: list[asyncio.Future[Any]] = [stop, failed]
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if not stop.done():
        stop.cancel()
        await asyncio.gather(stop, return_exceptions=True)
        log.error("stopping: the Raft driver failed", error=str(failed.result()))
        await controller.stop()
        return 1
    log.info("stopping", signal=stop.result())
    await controller.stop()
    return 0


def print_reference() -> None:
    click.echo("| key | type | default | meaning |\n|---|---|---|---|")
    for key, tp, default, help_text in reference(ControllerConfig):
        click.echo(f"| `{key}` | {tp} | `{default}` | {help_text} |")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="TOML config file; flags override it.",
)
@click.option("--id", "id", help="This controller's node id (one of --peers).")
@click.option("--peers", help='Controllers as "id-host:port;..." (this node serves on its own).')
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Raft log, hard state and snapshots.",
)
@click.option("--metrics-port", type=int, help="Prometheus /metrics port; 0 turns it off.")
@click.option("--log-format", type=click.Choice(["auto", "json", "console"]), help="Log format.")
@click.option(
    "--join",
    is_flag=True,
    default=None,
    help="Start empty and wait to be added with rmqctl addController.",
)
@click.option(
    "--print-config-reference",
    is_flag=True,
    help="Print every config key as a Markdown table and exit.",
)
def main(config_file: Path | None, print_config_reference: bool, **flags: Any) -> None:
    """Run a controller: a Raft member serving broker metadata, elections and routes."""
    if print_config_reference:
        print_reference()
        return
    try:
        cfg = load_config(config_file, flags)
    except ConfigError as exc:
        click.echo(f"rmq-controller: {exc}", err=True)
        sys.exit(2)
    setup_logging(cfg.log_format, cfg.log_level)
    sys.exit(run(lambda: serve(cfg)))


if __name__ == "__main__":
    main()
