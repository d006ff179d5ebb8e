"""A running broker's configuration, read and changed live (GET_BROKER_CONFIG,
UPDATE_BROKER_CONFIG; ``rmqctl getBrokerConfig`` and ``updateBrokerConfig``).

What a caller may rely on:

- Only the keys of :data:`LIVE_KEYS` change live; any other key of :class:`BrokerConfig` is
  refused naming the key and why it needs a restart (:func:`restart_reason`), an unknown key is
  refused, and a value is read and checked exactly as at start-up (:func:`daemon.config.check_key`).
  A refusal changes nothing.
- A change is kept in the broker's data directory, ``config/liveConfig.json``
  (:mod:`broker.live_file`), never in its config file, which the broker does not write: the
  entry is written first (a write that fails refuses the change), then the value applied. A key
  set back to its start value (what the config file and flags gave at this start) loses its
  entry.
- At start (:meth:`LiveConfig.start`, before the broker's parts are built from the config) the
  file's entries are applied over the config read from the file and flags, each whose start
  value is still the value the broker starts with. An entry whose start value differs (the
  config file or a flag changed since the live change: the file wins), or whose key is no
  longer live or whose value is no longer valid, is dropped with a warning; a file that cannot
  be read refuses the start (:class:`~broker.live_file.LiveFileError`).
- Applying sets the key on the one :class:`BrokerConfig` every part of the broker holds (the
  parts that read ``cfg.<key>`` at each use see it at once) and runs the hooks registered for
  the key (:meth:`LiveConfig.on_change`), for the parts that copied the value when they were
  built. The config stays frozen for everything else: this module is the one place that sets it.
  A hook that raises puts the old value back (config, hooks, live file) and the change is
  refused (SYSTEM_ERROR).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from broker.config import BrokerConfig
from broker.live_file import LiveEntry, live_file_path, read_entries, write_entries
from daemon.config import ConfigError, check_key, key_type
from protocol.broker_requests.broker_config import (
    BrokerConfigChanged,
    BrokerConfigTable,
    ChangedLive,
    ConfigValue,
)
from protocol.codes import ResponseCode
from protocol.refusal import RequestRefused

__all__ = ["LIVE_KEYS", "ConfigRefused", "LiveConfig", "restart_reason"]

log = structlog.get_logger(__name__)

LIVE_KEYS: dict[str, str] = {
    "log_level": "from the next log line",
    "flush_interval_ms": "from the next fsync period (flush = async)",
    "flush_consumequeue_least_pages": "from the next flush",
    "flush_consumequeue_thorough_interval_ms": "from the next flush",
    "retention_hours": "at the next retention run",
    "disk_max_used_ratio": "at the next retention run",
    "retention_check_interval_ms": "after the retention run now waiting",
    "max_message_bytes": "from the next send, on every front (the gRPC port's own frame limit "
    "stays the start-up value: a larger one reaches gRPC clients after a restart)",
    "max_pull_batch": "from the next pull or POP",
    "max_pull_bytes": "from the next pull or POP",
    "max_pull_suspend_ms": "from the next pull or POP",
    "client_expiry_ms": "at the next membership check",
    "auto_create_topic": "from the next send to an unknown topic",
    "default_topic_queues": "from the next topic created without a count",
    "sync_flush_timeout_ms": "from the next send waiting for its flush (flush = sync)",
    "slave_ack_timeout_ms": "from the next send waiting for its replicas",
    "transaction_check_max": "at the next check-back",
    "auth_refresh_interval_ms": "after the refresh now waiting (auth_enabled)",
    "scrub_bytes_per_s": "from the scrub's next slice (a tenth of a second)",
    "scrub_interval_hours": "when the scrub, resting between passes, next looks (a tenth of "
    "a second)",
    "cold_read_bytes_per_s": "from the next cold read",
}
"""The keys UPDATE_BROKER_CONFIG changes while the broker runs, and when each takes effect."""

_PORTS = "a port is bound once, when the broker starts"
_TLS = "TLS is set up when the broker starts (SIGHUP reloads changed certificate files)"
_FILES = "files on disk were made with this size; a change would not match them"
_SECURITY = "authentication is set up when the broker starts and is not changed over the network"
_RESTART_REASONS: dict[str, str] = {
    "cluster": "the broker group's identity, registered with the controllers and claimed in "
    "the data directory",
    "broker_name": "the broker group's identity, registered with the controllers and claimed "
    "in the data directory",
    "listen": _PORTS,
    "ha_port": _PORTS,
    "grpc_listen": _PORTS,
    "grpc_tls_listen": _PORTS,
    "metrics_port": _PORTS,
    "tls_cert": _TLS,
    "tls_key": _TLS,
    "tls_enabled": _TLS,
    "tls_ca_file": _TLS,
    "tls_verify_client": _TLS,
    "grpc_plaintext_with_tls": _TLS,
    "controllers": "the controllers are dialled from start-up (rmqctl addController and "
    "removeController change the controllers themselves)",
    "data_dir": "the store is opened there when the broker starts",
    "flush": "the write path (group commit or periodic fsync) is chosen when the broker starts",
    "commitlog_segment_bytes": _FILES,
    "consumequeue_segment_entries": _FILES,
    "consumequeue_open_files": "the ConsumeQueues' descriptor cache is sized when the store opens",
    "consumequeue_allocate_bytes": "the ConsumeQueues' allocation chunk is set when the store opens",
    "index_enable": "the key index is opened (or not) when the broker starts",
    "index_slots_per_file": _FILES,
    "index_entries_per_file": _FILES,
    "auth_enabled": _SECURITY,
    "auth_key_file": _SECURITY,
    "auth_timestamp_window_ms": _SECURITY,
    "election_priority": "it is registered with the controllers when the broker starts",
}


def restart_reason(key: str) -> str:
    """Why ``key`` (a config key not in :data:`LIVE_KEYS`) needs a restart."""
    return _RESTART_REASONS.get(key, "it is read once, when the broker starts")


class ConfigRefused(RequestRefused):
    """An update refused (nothing changed): the response code and the one-line remark."""


def wire_value(value: Any) -> ConfigValue:
    """A config value as GET_BROKER_CONFIG sends it (a path as text)."""
    return str(value) if isinstance(value, Path) else value


def parse_text(key: str, text: str) -> Any:
    """``text`` (as a command line gives it) read as ``key``'s type; :class:`ConfigError`
    naming the key when it is not one."""
    kind = key_type(BrokerConfig, key)
    stripped = text.strip()
    if kind is bool:
        if stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
        raise ConfigError(f"config key {key!r} must be true or false, got {text!r}")
    if kind is int:
        if re.fullmatch(r"[+-]?\d+", stripped):
            return int(stripped)
        raise ConfigError(f"config key {key!r} must be an integer, got {text!r}")
    if kind is float:
        try:
            return float(stripped)
        except ValueError:
            raise ConfigError(f"config key {key!r} must be a number, got {text!r}") from None
    return text


def _same(key: str, recorded: ConfigValue, now: Any) -> bool:
    """Whether ``recorded`` (a value as the live file keeps it) is ``now``, ``key``'s value."""
    try:
        value = check_key(BrokerConfig, key, recorded)
    except ConfigError:
        return False
    return type(value) is type(now) and bool(value == now)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _checked(key: str, entry: LiveEntry, start_now: Any) -> tuple[str | None, Any]:
    """Why a live file's entry is dropped at start (its key no longer live, its value no longer
    valid, or the config file or a flag changed the key since: it wins), with None; or None and
    the entry's value, checked."""
    if key not in LIVE_KEYS:
        return f"{key} is not a live config key now", None
    try:
        value = check_key(BrokerConfig, key, entry.value)
    except ConfigError as exc:
        return str(exc), None
    if not _same(key, entry.start_value, start_now):
        return (
            f"the config file (or a flag) changed {key} since, to {wire_value(start_now)!r}, "
            f"which wins over the live value {entry.value!r}"
        ), None
    return None, value


class LiveConfig:
    """The broker's config as a running broker reads and changes it (module docstring)."""

    def __init__(
        self,
        cfg: BrokerConfig,
        config_file: Path | None,
        entries: Mapping[str, LiveEntry] | None = None,
        start_values: Mapping[str, Any] | None = None,
    ) -> None:
        """``entries``: the live changes in effect (applied to ``cfg`` already); ``start_values``:
        the live keys' values from the config file and flags (default: ``cfg``'s now)."""
        self.cfg = cfg
        self.config_file = config_file.resolve() if config_file is not None else None
        self.live_file = live_file_path(cfg.data_dir).resolve()
        self.entries: dict[str, LiveEntry] = dict(entries or {})
        self.start_values: dict[str, Any] = (
            dict(start_values)
            if start_values is not None
            else {key: getattr(cfg, key) for key in LIVE_KEYS}
        )
        self.dropped = False
        """Entries were dropped at start: :meth:`save_dropped` writes the file without them."""
        self._hooks: dict[str, list[Callable[[Any], object]]] = {}
        self._fields = {f.name for f in dataclasses.fields(BrokerConfig)}

    @classmethod
    def start(cls, cfg: BrokerConfig, config_file: Path | None) -> LiveConfig:
        """The live file's entries applied over ``cfg`` (read from the config file and flags),
        each logged; the dropped ones warned of (module docstring). Raises
        :class:`~broker.live_file.LiveFileError` when the file cannot be read."""
        path = live_file_path(cfg.data_dir)
        recorded = read_entries(path)
        start_values = {key: getattr(cfg, key) for key in LIVE_KEYS}
        source = (
            f"the config file {config_file} says"
            if config_file is not None
            else "without --config the defaults and flags say"
        )
        kept: dict[str, LiveEntry] = {}
        for key, entry in recorded.items():
            start_now = start_values.get(key)
            why, value = _checked(key, entry, start_now)
            if why is not None:
                log.warning(
                    f"live config change of {key} dropped: {why}",
                    key=key,
                    value=wire_value(start_now),
                    live_value=entry.value,
                    live_start_value=entry.start_value,
                    set_at=entry.set_at,
                    path=str(path),
                )
                continue
            object.__setattr__(cfg, key, value)  # nothing is built from cfg yet: no hooks
            kept[key] = entry
            log.info(
                f"live config change of {key} applied: {wire_value(value)!r}, set at "
                f"{entry.set_at}; {source} {wire_value(start_now)!r}",
                key=key,
                value=wire_value(value),
                set_at=entry.set_at,
                set_by=entry.set_by,
                start_value=wire_value(start_now),
                path=str(path),
            )
        live = cls(cfg, config_file, kept, start_values)
        live.dropped = len(kept) != len(recorded)
        return live

    def save_dropped(self) -> None:
        """Write the live file without the entries :meth:`start` dropped (once the data
        directory is known to be this broker's); raises OSError."""
        if self.dropped:
            write_entries(self.live_file, self.entries)
            self.dropped = False

    def on_change(self, key: str, hook: Callable[[Any], object]) -> None:
        """Run ``hook(new value)`` after each live change of ``key`` (one of :data:`LIVE_KEYS`)."""
        if key not in LIVE_KEYS:
            raise ValueError(f"{key} is not a live config key")
        self._hooks.setdefault(key, []).append(hook)

    def table(self) -> BrokerConfigTable:
        return BrokerConfigTable(
            config={
                f.name: wire_value(getattr(self.cfg, f.name))
                for f in dataclasses.fields(BrokerConfig)
            },
            live_keys=tuple(LIVE_KEYS),
            config_file=str(self.config_file) if self.config_file is not None else None,
            live_file=str(self.live_file),
            changed_live={
                key: ChangedLive(
                    start_value=entry.start_value, set_at=entry.set_at, set_by=entry.set_by
                )
                for key, entry in sorted(self.entries.items())
            },
        )

    def _apply(self, key: str, value: Any) -> None:
        # The one place the frozen config is set while the broker runs (module docstring).
        object.__setattr__(self.cfg, key, value)
        for hook in self._hooks.get(key, ()):
            hook(value)

    def update(self, key: str, text: str, peer: str = "?") -> BrokerConfigChanged:
        """Set ``key`` from ``text`` for ``peer`` (its address): kept in the live file, then
        applied. Raises :class:`ConfigRefused` (nothing changed)."""
        if key not in self._fields:
            raise ConfigRefused(ResponseCode.CONFIG_KEY_UNKNOWN, f"unknown config key {key!r}")
        if key not in LIVE_KEYS:
            raise ConfigRefused(
                ResponseCode.CONFIG_KEY_NEEDS_RESTART,
                f"config key {key!r} needs a restart: {restart_reason(key)}; set it in the "
                "config file and restart the broker",
            )
        try:
            value = check_key(BrokerConfig, key, parse_text(key, text))
        except ConfigError as exc:
            raise ConfigRefused(ResponseCode.CONFIG_VALUE_INVALID, str(exc)) from None
        old = getattr(self.cfg, key)
        start = self.start_values[key]
        before = self.entries
        after = {k: e for k, e in before.items() if k != key}
        if not _same(key, wire_value(start), value):
            after[key] = LiveEntry(wire_value(value), wire_value(start), _now(), peer)
        try:
            write_entries(self.live_file, after)
        except OSError as exc:
            raise ConfigRefused(
                ResponseCode.CONFIG_NOT_PERSISTED,
                f"config key {key!r} not changed: cannot write {self.live_file}: "
                f"{exc.strerror or exc}",
            ) from None
        self.entries = after
        try:
            self._apply(key, value)
        except Exception as exc:  # a hook failed: put everything back, change nothing
            with contextlib.suppress(Exception):
                self._apply(key, old)
            with contextlib.suppress(OSError):
                write_entries(self.live_file, before)
            self.entries = before
            raise ConfigRefused(
                ResponseCode.SYSTEM_ERROR,
                f"config key {key!r} not changed: applying it failed ({type(exc).__name__}: {exc})",
            ) from None
        return BrokerConfigChanged(
            key=key,
            old=wire_value(old),
            new=wire_value(value),
            persisted=True,
            config_file=str(self.live_file),
            live_file=str(self.live_file),
            start_value=wire_value(start),
        )
