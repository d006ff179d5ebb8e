"""What every daemon's command line does the same way: load the config (file, then flags),
print the config reference, and run until a stop signal, exiting 2 on a config error."""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click
import structlog

from daemon import build_info, gc_tuning, systemd
from daemon.config import ConfigError, build, load_toml, reference
from daemon.logs import setup_logging
from daemon.signals import on_reload, run, wait_for_stop_signal

C = TypeVar("C")


class LoggingConfig(Protocol):
    @property
    def log_format(self) -> str: ...
    @property
    def log_level(self) -> str: ...


L = TypeVar("L", bound=LoggingConfig)


# The options every daemon's command line has, first and last (a click decorator can be reused:
# each use makes its own Option).
config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="TOML config file; flags override it.",
)
reference_option = click.option(
    "--print-config-reference",
    is_flag=True,
    help="Print every config key as a Markdown table and exit.",
)


class Daemon(Protocol):
    async def stop(self) -> None: ...
    def reload(self) -> None: ...


async def start_failed(log: Any, what: str, daemon: Daemon, exc: Exception) -> int:
    """A daemon's start raised what it did not expect: one error line, what had started is
    stopped, exit status 1."""
    log.error(f"{what} failed to start", error=f"{type(exc).__name__}: {exc}")
    await daemon.stop()
    return 1


async def serve_until_stopped(daemon: Daemon, status: str) -> str:
    """A started daemon serves until SIGTERM or SIGINT, whose name is returned: full collections
    made rare (they pause every thread, heartbeats included), SIGHUP reloads, and systemd is told
    it is ready (with ``status``) once the stop signals are handled. It logs which build runs,
    the compiled hot modules or the pure-Python ones (docs/compiled.md): here, once the daemon
    has started, so that a daemon refusing to start prints its one line and nothing else."""
    structlog.get_logger("daemon").info("build", **build_info.describe())
    gc_tuning.tune_for_latency()
    on_reload(daemon.reload)
    return await wait_for_stop_signal(lambda: systemd.ready(status))


def load_config(cls: type[C], config_file: Path | None, overrides: dict[str, Any]) -> C:
    """A ``cls`` from the TOML file (if any), then the non-None flags."""
    file_values = load_toml(config_file) if config_file else {}
    return build(cls, file_values, overrides)


def print_reference(cls: type[Any]) -> None:
    """Every config key of ``cls`` as a Markdown table (docs/config-reference.md)."""
    click.echo("| key | type | default | meaning |\n|---|---|---|---|")
    for key, tp, default, help_text in reference(cls):
        click.echo(f"| `{key}` | {tp} | `{default}` | {help_text} |")


def main(
    prog: str,
    cls: type[L],
    config_file: Path | None,
    print_config_reference: bool,
    flags: dict[str, Any],
    serve: Callable[[L], Coroutine[Any, Any, int]],
) -> None:
    """The body of a daemon's ``main``: reference, or config then serve; exits the process."""
    if print_config_reference:
        print_reference(cls)
        return
    try:
        cfg = load_config(cls, config_file, flags)
    except ConfigError as exc:
        click.echo(f"{prog}: {exc}", err=True)
        sys.exit(2)
    setup_logging(cfg.log_format, cfg.log_level)
    # A fault in native code kills the process with no Python exception: most often a read of
    # a mapped store file that was cut under the daemon, or a page the disk cannot read (SIGBUS).
    # This leaves "Fatal Python error: Bus error" and every thread's stack on stderr (the
    # journal) instead of an exit that says nothing.
    faulthandler.enable(all_threads=True)
    sys.exit(run(lambda: serve(cfg)))
