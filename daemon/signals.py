"""Run a daemon's main coroutine until SIGTERM or SIGINT, then let it shut down cleanly; SIGHUP
reloads (:func:`on_reload`)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any


async def wait_for_stop_signal(on_armed: Callable[[], object] | None = None) -> str:
    """Return the name of the first SIGTERM or SIGINT received.

    ``on_armed`` runs once the handlers are in place (where a daemon tells systemd it is ready:
    a stop asked for from then on is a clean one).
    """
    loop = asyncio.get_running_loop()
    got: asyncio.Future[str] = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):

        def handler(s: signal.Signals = sig) -> None:
            if not got.done():
                got.set_result(s.name)

        loop.add_signal_handler(sig, handler)
    if on_armed is not None:
        on_armed()
    try:
        return await got
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def on_reload(reload: Callable[[], object]) -> None:
    """Run ``reload`` on every SIGHUP (a daemon reloads its TLS certificates; without this a
    SIGHUP would end the process)."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)


def run(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run ``main`` on uvloop when available."""
    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(main())
