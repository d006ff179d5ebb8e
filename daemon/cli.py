"""What every daemon's command line does the same way: load the config (file, then flags),
print the config reference, and run until a stop signal, exiting 2 on a config error."""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click

from daemon.config import ConfigError, build, load_toml, reference
from daemon.logs import setup_logging
from daemon.signals import run

C = TypeVar("C")


class LoggingConfig(Protocol):
    @property
    def log_format(self) -> str: ...
    @property
    def log_level(self) -> str: ...


L = TypeVar("L", bound=LoggingConfig)


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
    sys.exit(run(lambda: serve(cfg)))
