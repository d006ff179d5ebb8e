"""``rmq-controller``: the controller daemon (Raft member, metadata state machine, routes)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import click
import structlog

from controller.config import ControllerConfig
from daemon import cli as daemon_cli
from daemon import systemd
from daemon.tasks import cancel_and_wait
from storage.raftlog import CorruptStorage

load_config = functools.partial(daemon_cli.load_config, ControllerConfig)


async def serve(cfg: ControllerConfig) -> int:
    from controller.app import Controller
    from remoting.ports import PortUnavailable

    log = structlog.get_logger("controller")
    try:
        controller = Controller(cfg)
    except PortUnavailable as exc:  # found before the Raft storage was opened
        click.echo(f"rmq-controller: cannot start: {exc}", err=True)
        return 1
    except CorruptStorage as exc:
        # One line naming the file and the offset of the damage; nothing on disk was changed.
        # Status 2, as for a config error: a restart cannot help (RestartPreventExitStatus=2).
        click.echo(f"rmq-controller: cannot start: {exc}", err=True)
        return 2
    except Exception as exc:  # unreadable storage: an operator must look
        log.error("controller failed to open its storage", error=f"{type(exc).__name__}: {exc}")
        return 1
    try:
        await controller.start()
    except Exception as exc:
        return await daemon_cli.start_failed(log, "controller", controller, exc)
    serving = f"serving controller {cfg.id} on {cfg.address}"
    stop = asyncio.ensure_future(daemon_cli.serve_until_stopped(controller, serving))
    failed = controller.driver.failure
    waiting: list[asyncio.Future[Any]] = [stop, failed]
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    systemd.stopping("stopping")
    if not stop.done():
        await cancel_and_wait([stop])
        log.error("stopping: the Raft driver failed", error=str(failed.result()))
        await controller.stop()
        return 1
    log.info("stopping", signal=stop.result())
    await controller.stop()
    return 0


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@daemon_cli.config_option
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
    "--auth-key-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The cluster's auth key: user secrets are stored sealed under it.",
)
@click.option(
    "--join",
    is_flag=True,
    default=None,
    help="Start empty and wait to be added with rmqctl addController.",
)
@daemon_cli.reference_option
def main(config_file: Path | None, print_config_reference: bool, **flags: Any) -> None:
    """Run a controller: a Raft member serving broker metadata, elections and routes."""
    daemon_cli.main(
        "rmq-controller", ControllerConfig, config_file, print_config_reference, flags, serve
    )


if __name__ == "__main__":
    main()
