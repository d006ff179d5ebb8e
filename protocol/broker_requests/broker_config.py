"""A broker's configuration, read and changed while it runs: GET_BROKER_CONFIG (26) and
UPDATE_BROKER_CONFIG (25), RocketMQ's numbers (docs/protocol.md). Pure: no sockets, no clock.

Requests::

    GET_BROKER_CONFIG 26       no fields
    UPDATE_BROKER_CONFIG 25    header key (a config key), value (its new value as text, the way
                               a command line gives it: 250, 1.5, true, debug); both non-empty

GET_BROKER_CONFIG's SUCCESS (:class:`BrokerConfigTable`)::

    {"config": {key: value}, "liveKeys": [key, ...], "configFile": path | nil}

every key with its value now (a path as text, an unset optional key nil), the keys that
UPDATE_BROKER_CONFIG changes live, and the TOML file a change is written to (nil: the broker
runs without ``--config``).

UPDATE_BROKER_CONFIG's SUCCESS (:class:`BrokerConfigChanged`)::

    {"key", "old", "new", "persisted": bool, "configFile": path | nil}

Refusals (nothing changed): CONFIG_KEY_UNKNOWN, CONFIG_KEY_NEEDS_RESTART (the remark names the key
and why), CONFIG_VALUE_INVALID (the remark as a bad value at start-up), CONFIG_NOT_PERSISTED (the
file could not be rewritten), NO_PERMISSION (not a super user, with authentication on).
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
class BrokerConfigTable:
    """GET_BROKER_CONFIG's SUCCESS."""

    config: Mapping[str, ConfigValue] = field(default_factory=dict)
    live_keys: tuple[str, ...] = ()
    config_file: str | None = None

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map(
            {
                "config": dict(self.config),
                "liveKeys": list(self.live_keys),
                "configFile": self.config_file,
            }
        )

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> BrokerConfigTable:
        doc = body_map(body, "broker config")
        config, live = doc.get("config", {}), doc.get("liveKeys", [])
        if not isinstance(config, dict) or not all(isinstance(k, str) for k in config):
            raise FieldError("'config' must map keys to values")
        if not isinstance(live, list) or not all(isinstance(k, str) for k in live):
            raise FieldError("'liveKeys' must be a list of keys")
        return cls(
            config={k: _value(config, k) for k in config},
            live_keys=tuple(live),
            config_file=_text_or_nil(doc, "configFile"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateBrokerConfig:
    """UPDATE_BROKER_CONFIG: set ``key`` to ``value`` (text, read by the key's type) now and in
    the broker's config file."""

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
    """UPDATE_BROKER_CONFIG's SUCCESS: the key's value before and after, and whether the change
    was written to ``config_file`` (False: the broker runs without one, a restart forgets it)."""

    key: str
    old: ConfigValue
    new: ConfigValue
    persisted: bool
    config_file: str | None = None

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map(
            {
                "key": self.key,
                "old": self.old,
                "new": self.new,
                "persisted": self.persisted,
                "configFile": self.config_file,
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
        )
