"""A running broker's configuration, read and changed live (GET_BROKER_CONFIG,
UPDATE_BROKER_CONFIG; ``rmqctl getBrokerConfig`` and ``updateBrokerConfig``).

What a caller may rely on:

- Only the keys of :data:`LIVE_KEYS` change live; any other key of :class:`BrokerConfig` is
  refused naming the key and why it needs a restart (:func:`restart_reason`), an unknown key is
  refused, and a value is read and checked exactly as at start-up (:func:`daemon.config.check_key`).
  A refusal changes nothing.
- A change is written to the broker's config file first (only that key's line is rewritten,
  comments and the other lines kept; temp file, fsync, rename), then applied: a file that cannot
  be rewritten refuses the change. A broker started without ``--config`` applies it live only
  (``persisted`` false: a restart forgets it).
- Applying sets the key on the one :class:`BrokerConfig` every part of the broker holds (the
  parts that read ``cfg.<key>`` at each use see it at once) and runs the hooks registered for
  the key (:meth:`LiveConfig.on_change`), for the parts that copied the value when they were
  built. The config stays frozen for everything else: this module is the one place that sets it.
  A hook that raises puts the old value back (config, hooks, file) and the change is refused
  (SYSTEM_ERROR).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from daemon.config import ConfigError, check_key, key_type
from protocol.broker_requests.broker_config import (
    BrokerConfigChanged,
    BrokerConfigTable,
    ConfigValue,
)
from protocol.codes import ResponseCode
from protocol.refusal import RequestRefused
from storage.small_file import fsync_dir

__all__ = ["LIVE_KEYS", "ConfigRefused", "LiveConfig", "restart_reason", "rewrite_key"]

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


class ConfigFileError(Exception):
    """The config file cannot be rewritten (one line: why)."""


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


def toml_value(value: Any) -> str:
    """``value`` written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string


def rewrite_key(path: Path, key: str, value: Any, note: str) -> None:
    """Set ``key = value`` in the TOML file ``path``: its line is replaced (or, absent, one is
    added after the last top-level key), with ``note`` as its comment; every other line stays.
    Written to a temp file, fsynced and renamed over ``path`` (its mode kept). Raises
    :class:`ConfigFileError` (nothing written) when the file cannot be read, is not TOML, or
    would not read back with the new value and the rest unchanged."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode & 0o7777
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path} is not valid TOML now: {exc}") from None
    line = f"{key} = {toml_value(value)}  # {note}\n"
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    top = next((i for i, ln in enumerate(lines) if re.match(r"\s*\[", ln)), len(lines))
    own = re.compile(rf"""\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*=""")
    at = next((i for i in range(top) if own.match(lines[i])), None)
    if at is not None:
        lines[at] = line
    else:
        last_key = max((i for i in range(top) if re.match(r"\s*[\w\"']", lines[i])), default=-1)
        lines.insert(last_key + 1, line)
    new_text = "".join(lines)
    try:
        after = tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"cannot rewrite {key} in {path}: {exc}") from None
    expected = {**before, key: value if not isinstance(value, Path) else str(value)}
    if after != expected:
        raise ConfigFileError(f"cannot rewrite {key} in {path}: its line spans several lines")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            os.write(fd, new_text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigFileError(f"cannot write {path}: {exc.strerror or exc}") from None


class LiveConfig:
    """The broker's config as a running broker reads and changes it (module docstring)."""

    def __init__(self, cfg: BrokerConfig, config_file: Path | None) -> None:
        self.cfg = cfg
        self.config_file = config_file.resolve() if config_file is not None else None
        self._hooks: dict[str, list[Callable[[Any], object]]] = {}
        self._fields = {f.name for f in dataclasses.fields(BrokerConfig)}

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
        )

    def _apply(self, key: str, value: Any) -> None:
        # The one place the frozen config is set (module docstring).
        object.__setattr__(self.cfg, key, value)
        for hook in self._hooks.get(key, ()):
            hook(value)

    def _put_back(self, key: str, old: Any, persisted: bool) -> None:
        with contextlib.suppress(Exception):
            self._apply(key, old)
        if persisted and self.config_file is not None:
            with contextlib.suppress(ConfigFileError):
                rewrite_key(self.config_file, key, old, "put back: a live change failed")

    def update(self, key: str, text: str) -> BrokerConfigChanged:
        """Set ``key`` from ``text``: written to the config file, then applied. Raises
        :class:`ConfigRefused` (nothing changed)."""
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
        persisted = False
        if self.config_file is not None:
            when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            note = f"set live by updateBrokerConfig {when} (was {toml_value(old)})"
            try:
                rewrite_key(self.config_file, key, value, note)
            except ConfigFileError as exc:
                raise ConfigRefused(
                    ResponseCode.CONFIG_NOT_PERSISTED, f"config key {key!r} not changed: {exc}"
                ) from None
            persisted = True
        try:
            self._apply(key, value)
        except Exception as exc:  # a hook failed: put everything back, change nothing
            self._put_back(key, old, persisted)
            raise ConfigRefused(
                ResponseCode.SYSTEM_ERROR,
                f"config key {key!r} not changed: applying it failed ({type(exc).__name__}: {exc})",
            ) from None
        return BrokerConfigChanged(
            key=key,
            old=wire_value(old),
            new=wire_value(value),
            persisted=persisted,
            config_file=str(self.config_file) if self.config_file is not None else None,
        )
