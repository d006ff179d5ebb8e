"""From a message's properties to the delivery time it asks for (pure: ``now_ms`` is an input).

The broker calls :func:`requested_delivery_ms` on every send: None means an ordinary message;
an int is the absolute time to give :meth:`TimingWheel.due_time`; a malformed or negative value
raises :class:`InvalidDeliveryTimeError` (the send is refused with that message, nothing is
stored).
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.timer import (
    PROP_START_DELIVER_TIME,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
)
from storage.timer.wheel import InvalidDeliveryTimeError

_ABSOLUTE = (PROP_TIMER_DELIVER_MS, PROP_START_DELIVER_TIME)
_RELATIVE = ((PROP_TIMER_DELAY_MS, 1), (PROP_TIMER_DELAY_SEC, 1000))


def _parse(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidDeliveryTimeError(f"{name}={text!r} is not an integer") from None
    if value < 0:
        raise InvalidDeliveryTimeError(f"{name}={value} is negative")
    return value


def requested_delivery_ms(properties: Mapping[str, str], now_ms: int) -> int | None:
    """The absolute delivery time ``properties`` ask for, or None when they ask for none.

    An absolute time (``TIMER_DELIVER_MS``, else ``__STARTDELIVERTIME``) wins over a delay
    (``TIMER_DELAY_MS``, else ``TIMER_DELAY_SEC``), which counts from ``now_ms``. Bounds (the
    maximum delay) are the wheel's to check.
    """
    for name in _ABSOLUTE:
        text = properties.get(name)
        if text is not None:
            return _parse(name, text)
    for name, unit in _RELATIVE:
        text = properties.get(name)
        if text is not None:
            return now_ms + _parse(name, text) * unit
    return None
