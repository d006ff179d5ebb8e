"""Readiness for systemd (``Type=notify``): the sd_notify protocol, written out.

systemd passes a datagram socket in ``$NOTIFY_SOCKET`` (a path, or an abstract name written with
a leading ``@``); a service sends newline-separated ``KEY=VALUE`` assignments to it: ``READY=1``
once it serves, ``STOPPING=1`` when it begins shutting down, ``STATUS=...`` as a human-readable
line for ``systemctl status``. Without the variable (not started by systemd) nothing is sent.
A failed send is logged and otherwise ignored: the daemon serves either way, and under
``Type=notify`` systemd reports the missing readiness itself (start-up timeout).
"""

from __future__ import annotations

import os
import socket

import structlog

log = structlog.get_logger(__name__)


def _address(raw: str) -> str | None:
    """The socket address for ``$NOTIFY_SOCKET``: a path, or ``\\0name`` for ``@name``."""
    if raw.startswith("@"):
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    return None  # vsock and other transports are not for services on bare metal


def notify(*assignments: str) -> bool:
    """Send ``assignments`` (``"READY=1"``, ``"STATUS=..."``) as one datagram to systemd.

    Returns True when a datagram was sent, False when there is no (usable) notify socket.
    """
    raw = os.environ.get("NOTIFY_SOCKET", "")
    if not raw:
        return False
    address = _address(raw)
    if address is None:
        log.warning("NOTIFY_SOCKET is not a unix socket address; not notifying", socket=raw)
        return False
    message = "\n".join(assignments).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message, address)
    except OSError as exc:
        log.warning("sd_notify failed", socket=raw, error=f"{type(exc).__name__}: {exc}")
        return False
    return True


def ready(status: str) -> bool:
    """The daemon serves: ``READY=1`` (systemd starts the units ordered after it)."""
    return notify("READY=1", f"STATUS={status}")


def stopping(status: str) -> bool:
    """The daemon begins a clean shutdown: ``STOPPING=1``."""
    return notify("STOPPING=1", f"STATUS={status}")
