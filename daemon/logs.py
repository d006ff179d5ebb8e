"""Logging with structlog: console lines on a terminal, JSON lines otherwise.

A daemon's log lines never stop it: they are written to stderr by a thread of their own
(:class:`LogWriter`), so a log call neither blocks the event loop nor raises.

- The reader went away (``make run``'s launcher killed, ``| tee`` ended: the pipe is broken):
  further lines are discarded. Before, the ``BrokenPipeError`` of a log call in the shutdown path
  (``log.info("stopping")``) ended the daemon without its clean stop: a broker left its abort
  marker (the next start recovered as after a crash), a controller did not close its Raft log.
- Nobody reads a pipe that is full (``| less`` left on its first page): lines wait in a bounded
  queue, and past :data:`QUEUE_LINES` new lines are dropped and counted; when the output is read
  again, a warning ``log lines dropped`` says how many. Serving, and stopping, go on meanwhile: a
  daemon's log is not worth a stalled broker or a controller that misses its Raft heartbeats.
- At exit the lines still queued are written, waiting at most :data:`EXIT_FLUSH_SECONDS` for a
  reader of a full pipe.
"""

from __future__ import annotations

import atexit
import collections
import errno
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

import structlog

QUEUE_LINES = 10_000
"""Lines waiting for the writer thread past which new lines are dropped (and counted)."""

EXIT_FLUSH_SECONDS = 2.0
"""How long a stopping daemon waits for its queued lines to be written (a full pipe's reader)."""


class LogWriter:
    """Lines to a file descriptor, written by a daemon thread; :meth:`write` never blocks or
    raises. A broken pipe (EPIPE) ends all writing; another write error (ENOSPC on a log file)
    loses the lines of that write, counted as dropped."""

    def __init__(
        self,
        fd: int,
        capacity: int = QUEUE_LINES,
        on_dropped: Callable[[int], object] | None = None,
    ) -> None:
        """``on_dropped(n)`` runs on the writer thread once output flows again after ``n``
        lines were dropped (it logs a warning through the writer)."""
        self.fd = fd
        self.capacity = capacity
        self.on_dropped = on_dropped
        self.dropped = 0
        """Lines dropped and not yet reported (the writer reports them once output resumes)."""
        self.broken = False
        self._lines: collections.deque[bytes] = collections.deque()
        self._writing = False
        self._cond = threading.Condition(threading.Lock())
        self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self._thread.start()

    def write(self, line: str) -> None:
        """Queue ``line`` (a newline is added); dropped when the queue is full."""
        data = (line + "\n").encode("utf-8", errors="replace")
        with self._cond:
            if self.broken:
                return
            if len(self._lines) >= self.capacity:
                self.dropped += 1
                return
            self._lines.append(data)
            self._cond.notify()

    def flush(self, timeout: float) -> bool:
        """Wait until every queued line is written (or discarded); False after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._lines or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._lines:
                    self._cond.wait()
                batch = b"".join(self._lines)
                self._lines.clear()
                self._writing = True
            try:
                self._write_all(batch)
            finally:
                with self._cond:
                    self._writing = False
                    dropped, self.dropped = (0, self.dropped) if self.broken else (self.dropped, 0)
                    self._cond.notify_all()
            if dropped and self.on_dropped is not None:
                self.on_dropped(dropped)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except InterruptedError:
                continue
            except OSError as exc:
                with self._cond:
                    if exc.errno == errno.EPIPE:
                        self.broken = True  # nobody will read again: discard from now on
                        self._lines.clear()
                    else:
                        self.dropped += bytes(view).count(b"\n")
                return
            view = view[n:]


class _WriterLogger:
    """structlog's logger: hands the rendered line to the writer (``PrintLogger``'s methods)."""

    def __init__(self, writer: LogWriter) -> None:
        self._writer = writer

    def msg(self, message: str) -> None:
        self._writer.write(message)

    log = debug = info = warn = warning = err = error = critical = exception = fatal = msg


class _WriterHandler(logging.Handler):
    """The standard library's records, formatted, to the same writer."""

    def __init__(self, writer: LogWriter) -> None:
        super().__init__()
        self._writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.write(self.format(record))
        except Exception:  # a record that cannot be formatted; never raises into the caller
            self.handleError(record)


_writer: LogWriter | None = None


def log_writer() -> LogWriter | None:
    """The writer set up by :func:`setup_logging` (None before)."""
    return _writer


def _report_dropped(dropped: int) -> None:
    # Output flows again: say what was lost, through the log (so in its format).
    structlog.get_logger(__name__).warning(
        "log lines dropped", dropped=dropped, reason="the log output was not read in time"
    )


def _flush_at_exit() -> None:
    if _writer is not None:
        _writer.flush(EXIT_FLUSH_SECONDS)


_METHOD_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
_level = logging.INFO


def set_level(level: str) -> None:
    """Log from ``level`` (debug, info, warning, error) on, from now on: structlog's loggers and
    the standard library's (a broker's live ``log_level`` change)."""
    global _level
    _level = getattr(logging, level.upper(), logging.INFO)
    logging.getLogger().setLevel(_level)


def _below_level(
    _logger: object, method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    if _METHOD_LEVELS.get(method, logging.CRITICAL) < _level:
        raise structlog.DropEvent
    return event


def setup_logging(fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog and the standard library's logging to one stream (stderr), written
    by a :class:`LogWriter`."""
    global _writer
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    lvl = getattr(logging, level.upper(), logging.INFO)
    set_level(level)
    processors: list[structlog.typing.Processor] = [
        _below_level,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if use_json:
        processors.append(structlog.processors.dict_tracebacks)
    processors.append(renderer)
    if _writer is None:
        sys.stderr.flush()  # what was printed before goes out before the first log line
        _writer = LogWriter(sys.stderr.fileno(), on_dropped=_report_dropped)
        atexit.register(_flush_at_exit)
    writer = _writer
    structlog.configure(
        processors=processors,
        # Every level reaches _below_level, which drops what is under the level now: loggers
        # cached on first use keep their class, so a filtering class could not change level.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=lambda *_args: _WriterLogger(writer),
        cache_logger_on_first_use=True,
    )
    handler = _WriterHandler(writer)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=lvl, handlers=[handler], force=True)
    logging.captureWarnings(True)  # warnings.warn would write (and block) on stderr itself
