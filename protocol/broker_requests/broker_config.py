"""A broker's configuration, read and changed while it runs: GET_BROKER_CONFIG (26) and
UPDATE_BROKER_CONFIG (25), RocketMQ's numbers (docs/protocol.md). Pure: no sockets, no clock.

Requests::

    GET_BROKER_CONFIG 26       no fields
    UPDATE_BROKER_CONFIG 25    header key (a config key), value (its new value as text, the way
                               a command line gives it: 250, 1.5, true, debug); both non-empty

GET_BROKER_CONFIG's SUCCESS (:class:`BrokerConfigTable`)::

    {"config": {key: value}, "liveKeys": [key, ...], "configFile": path | nil,
     "liveFile": path | nil, "changedLive": {key: {"startValue", "setAt", "setBy"}}}

every key with its value now (a path as text, an unset optional key nil), the keys that
UPDATE_BROKER_CONFIG changes live, the TOML file the broker was started with (nil: without
``--config``; the broker never writes it), the file in its data directory where live changes
are kept, and per key changed live its value at start from the config file and flags, when
(UTC) and by which peer it was changed. ``liveFile`` and ``changedLive`` are newer: an older
broker leaves them out (parsed as nil and {}).

UPDATE_BROKER_CONFIG's SUCCESS (:class:`BrokerConfigChanged`)::

    {"key", "old", "new", "persisted": bool, "configFile": path | nil, "liveFile": path | nil,
     "startValue"}

``persisted``: the change was written to a file a restart reads, ``configFile`` (an older
broker's config file; now always true, and ``configFile`` is the live file, the same as
``liveFile``, so an older rmqctl says where it went). ``startValue``: the key's value from the
config file and flags at this start; a change back to it removes the key's live entry. The last
two are newer: an older broker leaves them out (parsed as nil).

Refusals (nothing changed): CONFIG_KEY_UNKNOWN, CONFIG_KEY_NEEDS_RESTART (the remark names the key
and why), CONFIG_VALUE_INVALID (the remark as a bad value at start-up), CONFIG_NOT_PERSISTED (the
live file could not be written), NO_PERMISSION (not a super user, with authentication on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from protocol.broker_requests import body_map, pack_map
from protocol.codes import RequestCode
from protocol.fields import FieldError, req_str
from protocol.no_fields import NoFields
from protocol.remoting import Header, Scalar

__all__ = [
    "BrokerConfigChanged",
    "BrokerConfigQuery",
    "BrokerConfigTable",
    "ChangedLive",
    "ConfigValue",
    "UpdateBrokerConfig",
]

ConfigValue = str | int | float | bool | None
"""A config key's value on the wire (paths travel as text)."""

_SCALARS = (str, int, float, bool, type(None))


def _value(doc: Mapping[str, Any], name: str) -> ConfigValue:
    value = doc.get(name)
    if not isinstance(value, _SCALARS):
        raise FieldError(f"{name!r} must be a scalar")
    return value


def _text_or_nil(doc: Mapping[str, Any], name: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise FieldError(f"{name!r} must be text or nil")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigQuery(NoFields):
    """GET_BROKER_CONFIG: every config key with its value now (no fields)."""

    code: ClassVar[RequestCode] = RequestCode.GET_BROKER_CONFIG


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangedLive:
    """A key changed live: its start value (config file and flags), when (UTC) and by whom."""

    start_value: ConfigValue
    set_at: str
    set_by: str

    def to_dict(self) -> dict[str, ConfigValue]:
        return {"startValue": self.start_value, "setAt": self.set_at, "setBy": self.set_by}

    @classmethod
    def from_dict(cls, key: str, doc: Any) -> ChangedLive:
        if not isinstance(doc, dict):
            raise FieldError(f"'changedLive' of {key!r} must be a map")
        set_at, set_by = doc.get("setAt"), doc.get("setBy")
        if not isinstance(set_at, str) or not isinstance(set_by, str):
            raise FieldError(f"'changedLive' of {key!r} needs setAt and setBy as text")
        return cls(start_value=_value(doc, "startValue"), set_at=set_at, set_by=set_by)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigTable:
    """GET_BROKER_CONFIG's SUCCESS."""

    config: Mapping[str, ConfigValue] = field(default_factory=dict)
    live_keys: tuple[str, ...] = ()
    config_file: str | None = None
    live_file: str | None = None
    changed_live: Mapping[str, ChangedLive] = field(default_factory=dict)

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map(
            {
                "config": dict(self.config),
                "liveKeys": list(self.live_keys),
                "configFile": self.config_file,
                "liveFile": self.live_file,
                "changedLive": {k: c.to_dict() for k, c in self.changed_live.items()},
            }
        )

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> BrokerConfigTable:
        doc = body_map(body, "broker config")
        config, live = doc.get("config", {}), doc.get("liveKeys", [])
        changed = doc.get("changedLive", {})
        if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
            raise FieldError("'config' must map keys to values")
        if not isinstance(live, list) or not all(isinstance(k, str) for k in live):
            raise FieldError("'liveKeys' must be a list of keys")
        if not isinstance(changed, dict) or not all(isinstance(k, str) for k in changed):
            raise FieldError("'changedLive' must map keys to changes")
        return cls(
            config={k: _value(config, k) for k in config},
            live_keys=tuple(live),
            config_file=_text_or_nil(doc, "configFile"),
            live_file=_text_or_nil(doc, "liveFile"),
            changed_live={k: ChangedLive.from_dict(k, changed[k]) for k in changed},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateBrokerConfig:
    """UPDATE_BROKER_CONFIG: set ``key`` to ``value`` (text, read by the key's type) now and in
    the broker's live file."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_BROKER_CONFIG

    key: str
    value: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"key": self.key, "value": self.value}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UpdateBrokerConfig:
        return cls(key=req_str(header, "key"), value=req_str(header, "value"))


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigChanged:
    """UPDATE_BROKER_CONFIG's SUCCESS: the key's value before and after, whether the change was
    written to a file a restart reads (``config_file``; from an older broker False: it ran
    without one, a restart forgets it), the live file it is kept in and the key's start value
    (module docstring)."""

    key: str
    old: ConfigValue
    new: ConfigValue
    persisted: bool
    config_file: str | None = None
    live_file: str | None = None
    start_value: ConfigValue = None

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map(
            {
                "key": self.key,
                "old": self.old,
                "new": self.new,
                "persisted": self.persisted,
                "configFile": self.config_file,
                "liveFile": self.live_file,
                "startValue": self.start_value,
            }
        )

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> BrokerConfigChanged:
        doc = body_map(body, "config change")
        key, persisted = doc.get("key"), doc.get("persisted")
        if not isinstance(key, str):
            raise FieldError("'key' must be text")
        if not isinstance(persisted, bool):
            raise FieldError("'persisted' must be true or false")
        return cls(
            key=key,
            old=_value(doc, "old"),
            new=_value(doc, "new"),
            persisted=persisted,
            config_file=_text_or_nil(doc, "configFile"),
            live_file=_text_or_nil(doc, "liveFile"),
            start_value=_value(doc, "startValue"),
        )
