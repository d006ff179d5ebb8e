"""The SDK's loggers: quiet unless the application turns logging on.

A library must not write to the application's stdout. Each call is routed when it is made
(applications configure logging after importing the SDK):

- structlog configured (``structlog.configure``, as our daemons, rmqctl and the pipeline do): the
  line goes to structlog and follows that configuration, as any other structlog line;
- otherwise: to the standard library's ``logging`` under the module's name (``client.consumer``,
  ...) as ``event key=value ...``. Unconfigured, Python's last-resort handler writes warnings and
  errors to stderr, one line each, and drops info and debug; ``logging.basicConfig(level=INFO)``
  shows them all.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog


class SdkLogger:
    """The structlog call style (``log.info("event", key=value)``) with the routing above."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._structlog: Any = structlog.get_logger(name)  # a lazy proxy: bound at first use
        self._stdlib = logging.getLogger(name)

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, "error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        fields.setdefault("exc_info", True)
        self._log(logging.ERROR, "error", event, fields)

    def _log(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        if structlog.is_configured():
            getattr(self._structlog, method)(event, **fields)
        elif self._stdlib.isEnabledFor(level):
            exc_info = fields.pop("exc_info", None)
            self._stdlib.log(level, render(event, fields), exc_info=exc_info)


def render(event: str, fields: dict[str, Any]) -> str:
    """``event key=value ...`` on one line; a string value with spaces (or none) is quoted."""
    parts = [event]
    for key, value in fields.items():
        text = str(value)
        if isinstance(value, str) and (not value or any(c.isspace() for c in value)):
            text = repr(value)
        elif "\n" in text:
            text = repr(text)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def get_logger(name: str) -> SdkLogger:
    return SdkLogger(name)
