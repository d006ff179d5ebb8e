"""What every rmqctl command shares: the address option, running a coroutine, output, errors.

A command module defines click commands that take :class:`Settings` (``@pass_settings``), do
their work in a coroutine run by :func:`run`, and print through :func:`emit`. Failures become a
:class:`CommandError`: one line on stderr, exit status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import sys
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TextIO, TypeVar

import click

from client.errors import ClientError
from remoting.errors import RemotingError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

ADDRESSES_ENV = "RMQCTL_ADDRESSES"


@dataclass(slots=True)
class Settings:
    """Global options, shared by every command through click's context object."""

    json: bool = False
    verbose: bool = False
    addresses: str | None = None


pass_settings = click.make_pass_decorator(Settings, ensure=True)


class CommandError(click.ClickException):
    """A command failed: ``rmqctl: <message>`` on stderr, exit status 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"rmqctl: {self.format_message()}", err=True)


def _json_after_command(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(Settings).json = True


json_option = click.option(
    "--json",
    is_flag=True,
    expose_value=False,
    callback=_json_after_command,
    help="Same as the global --json.",
)
"""``--json`` accepted after the command name too (``rmqctl topicList --json``)."""


def _resolve_addresses(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """The command's own -a, else the global -a (or $RMQCTL_ADDRESSES)."""
    if value:
        return value
    settings = ctx.find_object(Settings)
    if settings is not None and settings.addresses:
        return settings.addresses
    raise click.MissingParameter(ctx=ctx, param=param)


def addresses_option(func: F) -> F:
    """``-a ADDRS`` (controller or broker addresses, ``;``-separated, any may be down; ``-n``,
    mqadmin's name server flag, is the same option), and ``--json`` also accepted after the
    command name."""
    func = json_option(func)
    return click.option(
        "-a",
        "-n",
        "--addresses",
        "addresses",
        callback=_resolve_addresses,
        metavar="ADDRS",
        help=(
            "Controller addresses, or a lone broker's, separated by ';' (any may be down); -n "
            f"is mqadmin's name for it. Default: the global -a, then ${ADDRESSES_ENV}."
        ),
    )(func)


topic_option = click.option("-t", "--topic", required=True, metavar="TOPIC", help="Topic name.")
group_option = click.option("-g", "--group", required=True, metavar="GROUP", help="Consumer group.")


class TimeType(click.ParamType[int]):
    """A point in time: epoch milliseconds, or ISO 8601 (UTC unless it gives an offset, like
    every time rmqctl prints). A value that is neither is a usage error (exit status 2)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.isdigit():
            return int(text)
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{value!r} is neither epoch milliseconds nor an ISO 8601 time "
                "(e.g. 2026-11-24T15:00:00, UTC, or 2026-11-24T16:00:00+01:00)",
                param,
                ctx,
            )
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return int(when.timestamp() * 1000)


_RELATIVE = re.compile(r"-(\d+)(ms|s|m|h|d)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_MQADMIN = re.compile(r"\d{4}-\d{2}-\d{2}#\d{2}:\d{2}:\d{2}:\d{3}")


class PastTimeType(click.ParamType[int]):
    """A time as an operator gives it for what was stored (resetOffsetByTime and the message
    queries): ``now``, a time ago (``-1h``, ``-30m``, ``-90s``, ``-2d``, ``-500ms``), epoch
    milliseconds, ISO 8601 (UTC unless it gives an offset) or mqadmin's
    ``yyyy-MM-dd#HH:mm:ss:SSS`` (UTC). Anything else is a usage error (exit status 2)."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        now = int(time.time() * 1000)
        if text == "now":
            return now
        relative = _RELATIVE.fullmatch(text)
        if relative is not None:
            return now - int(relative.group(1)) * _UNIT_MS[relative.group(2)]
        if _MQADMIN.fullmatch(text):
            when = datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").replace(tzinfo=UTC)
            return int(when.timestamp() * 1000)
        try:
            return TimeType().convert(text, param, ctx)
        except click.BadParameter:
            self.fail(
                f"{value!r} is not a time: give now, a time ago (-1h, -30m, -90s, -2d), epoch "
                "milliseconds, ISO 8601 (2026-11-24T15:00:00, UTC) or yyyy-MM-dd#HH:mm:ss:SSS",
                param,
                ctx,
            )


def one_cluster(clusters: Mapping[str, T], cluster: str) -> T:
    """``clusters[cluster]`` (the controllers' cluster list), or a :class:`ClientError` naming
    the clusters they know (-c of a name no broker registered with)."""
    if cluster not in clusters:
        known = ", ".join(sorted(clusters)) or "none"
        raise ClientError(f"cluster {cluster!r} not found (known: {known})")
    return clusters[cluster]


def utc_iso(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 in UTC: ``2026-11-24T15:00:00.000+00:00``."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay usable without it
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; SDK and connection failures become a :class:`CommandError`."""
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(coro)
    except (ClientError, RemotingError) as exc:
        raise CommandError(str(exc)) from None
    except ValueError as exc:  # e.g. an address that is not host:port
        raise CommandError(str(exc)) from None


def emit(settings: Settings, doc: Any, human: Callable[[], str]) -> None:
    """Print ``doc`` as one JSON document with ``--json``, else the human rendering."""
    write_stdout((json.dumps(doc) if settings.json else human()) + "\n")


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout, every byte of it.

    With ``PYTHONUNBUFFERED`` set (``python -u``) ``sys.stdout`` writes straight to the file
    descriptor, and one ``write(2)`` may take only part of a large document (a pipe's 64 KiB,
    when the descriptor is non-blocking or the call is interrupted): ``sys.stdout.write`` then
    drops the rest silently and the reader gets a cut document with exit status 0. The bytes
    are written here until none is left, waiting for the pipe when it is full. A stream with no
    descriptor (click's test runner) gets a plain write."""
    stream = sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    data = memoryview(text.encode(stream.encoding or "utf-8", stream.errors or "strict"))
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        data = data[written:]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned text table: a header line, then one line per row."""
    cells = [[str(h) for h in headers], *([("" if c is None else str(c)) for c in r] for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def draws_progress(stream: TextIO) -> bool:
    """Whether a spinner or progress bar may be drawn on ``stream``: only on a terminal (not a
    pipe, a file, or ``TERM=dumb``), so scripts reading stderr see only the error lines."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


class Spinner:
    """A spinner on stderr saying what a command waits for (``| waiting for messages of T``),
    drawn only when stderr is a terminal (:func:`draws_progress`); otherwise it does nothing.

    ::

        async with Spinner("searching every broker group of orders") as spinner:
            ...
            spinner.clear()       # before writing to stdout on the same terminal
            spinner.say("...")    # a new text (redrawn with the next frame)
    """

    FRAMES = "|/-\\"
    INTERVAL = 0.1

    def __init__(self, what: str, stream: TextIO | None = None) -> None:
        self.what = what
        self.stream = sys.stderr if stream is None else stream
        self.enabled = draws_progress(self.stream)
        self._task: asyncio.Task[None] | None = None
        self._drawn = False

    def say(self, what: str) -> None:
        self.what = what

    def clear(self) -> None:
        """Erase the spinner's line (it comes back with the next frame)."""
        if self._drawn:
            self._write("\r\x1b[K")
            self._drawn = False

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.write(text)
            self.stream.flush()

    async def _spin(self) -> None:
        frame = 0
        while True:
            self._write(f"\r\x1b[K{self.FRAMES[frame % len(self.FRAMES)]} {self.what} ")
            self._drawn = True
            frame += 1
            await asyncio.sleep(self.INTERVAL)

    async def __aenter__(self) -> Spinner:
        if self.enabled:
            self._task = asyncio.create_task(self._spin())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.clear()


def stdout_closed() -> None:
    """Stdout went away (``| head``): silence the interpreter's flush error at exit."""
    try:
        sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - lives until exit
    except OSError:
        pass
