"""Which of a stream of repeated events to log: the first from each key in every window, saying
how many from that key were not logged since (pure: the time is an input). The refusals of the
request guards (:mod:`remoting.auth`, keyed by source host) and of the HA master
(:mod:`broker.ha.refusals`, by reason and peer host) are logged through it, so a peer retrying
in a loop cannot flood the log."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LogThrottle"]

K = TypeVar("K", bound=Hashable)


class LogThrottle(Generic[K]):
    """One logged event per key per ``window_ms``; at most ``max_keys`` keys remembered."""

    __slots__ = ("_last", "_max_keys", "_window_ms")

    def __init__(self, window_ms: int, max_keys: int) -> None:
        self._window_ms = window_ms
        self._max_keys = max_keys
        self._last: dict[K, tuple[int, int]] = {}
        """key -> (when it was last logged, events not logged since)."""

    def admit(self, key: K, now_ms: int) -> int | None:
        """None: do not log this one; else how many events of ``key`` were not logged before
        it."""
        last = self._last.get(key)
        if last is not None and now_ms - last[0] < self._window_ms:
            self._last[key] = (last[0], last[1] + 1)
            return None
        if last is None and len(self._last) >= self._max_keys:
            self._last.clear()  # many keys: forget them all rather than grow without bound
        self._last[key] = (now_ms, 0)
        return 0 if last is None else last[1]
