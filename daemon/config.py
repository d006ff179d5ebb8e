"""Strict configuration: a dataclass of typed fields, filled from a TOML file and then flags.

Unknown keys and values of the wrong type or out of range raise :class:`ConfigError` naming the
key; daemons print that one line and exit with status 2. Flags override the file.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from daemon.auth_key import load_auth_key

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid."""


@dataclasses.dataclass(frozen=True)
class Check:
    """Metadata for a config field: a one-line help text and an optional validator."""

    help: str
    validate: Callable[[Any], str | None] | None = None


def choice(*allowed: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"

    return check


def at_least(lo: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value >= lo else f"must be >= {lo:g}"

    return check


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if lo <= value <= hi else f"must be between {lo:g} and {hi:g}"

    return check


def address(value: Any) -> str | None:
    host, _, port = str(value).rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return "must be host:port"
    return None


def address_list(value: Any) -> str | None:
    if value == "":
        return None
    for item in str(value).split(";"):
        if address(item.strip()) is not None:
            return f"must be host:port entries separated by ';' (bad entry {item!r})"
    return None


def port(value: Any) -> str | None:
    return None if 0 <= value <= 65535 else "must be a port number 0-65535"


def field(default: Any, help: str, validate: Callable[[Any], str | None] | None = None) -> Any:
    return dataclasses.field(default=default, metadata={"check": Check(help, validate)})


def log_format_field() -> Any:
    """Every daemon's ``log_format`` key (:func:`daemon.logs.setup_logging`'s ``fmt``)."""
    return field(
        "auto",
        "auto (console on a terminal, else json), json or console",
        choice("auto", "json", "console"),
    )


def log_level_field() -> Any:
    """Every daemon's ``log_level`` key (:func:`daemon.logs.setup_logging`'s ``level``)."""
    return field(
        "info", "debug, info, warning or error", choice("debug", "info", "warning", "error")
    )


def _base_type(tp: Any) -> tuple[type, bool]:
    """The scalar type of a field annotation and whether None is allowed."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


_SCALARS: dict[Any, tuple[Callable[[Any], bool], Callable[[Any], Any], str]] = {
    bool: (lambda v: isinstance(v, bool), bool, "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), int, "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), float, "a number"),
    str: (lambda v: isinstance(v, str), str, "a string"),
    Path: (lambda v: isinstance(v, str | Path), Path, "a path"),
}
"""Each scalar type a key may have: which values it takes, what it makes of one, and what the
error says a value must be."""


def _coerce(key: str, value: Any, tp: Any) -> Any:
    base, optional = _base_type(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"config key {key!r} must not be empty")
    scalar = _SCALARS.get(base)
    if scalar is None:
        raise ConfigError(f"config key {key!r} has an unsupported type")
    takes, make, what = scalar
    if takes(value):
        return make(value)
    raise ConfigError(f"config key {key!r} must be {what}, got {value!r}")


def check_tls_and_auth_key(
    tls_files: Callable[[], object],
    tls_error: type[Exception],
    auth_enabled: bool,
    auth_key_file: Path | None,
) -> None:
    """A daemon's cross-key rules for its secrets, in this order: its TLS files load
    (``tls_files()`` raises ``tls_error`` naming the key and the fault), ``auth_enabled`` needs
    ``auth_key_file``, and that file holds a usable key. Raises :class:`ConfigError`."""
    try:
        tls_files()
    except tls_error as exc:
        raise ConfigError(str(exc)) from None
    if auth_enabled and auth_key_file is None:
        raise ConfigError("config key 'auth_enabled' needs auth_key_file")
    if auth_key_file is not None:
        try:
            load_auth_key(auth_key_file)
        except ValueError as exc:
            raise ConfigError(f"config key 'auth_key_file': {exc}") from None


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def build(cls: type[T], file_values: Mapping[str, Any], overrides: Mapping[str, Any]) -> T:
    """Make a ``cls`` from file values, then non-None overrides (flags); validate every key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for source in (file_values, {k: v for k, v in overrides.items() if v is not None}):
        for key, raw in source.items():
            if key not in fields:
                raise ConfigError(f"unknown config key {key!r}")
            values[key] = _coerce(key, raw, hints[key])
    for key, value in values.items():
        _validate(fields[key], value)
    return cls(**values)


def _validate(f: dataclasses.Field[Any], value: Any) -> None:
    check: Check | None = f.metadata.get("check")
    if check is not None and check.validate is not None and value is not None:
        problem = check.validate(value)
        if problem:
            raise ConfigError(f"config key {f.name!r} {problem}, got {value!r}")


def check_key(cls: type[Any], key: str, raw: Any) -> Any:
    """One key's value read and checked as :func:`build` does at start-up (a daemon's live
    change of a key): the value, or :class:`ConfigError` naming the key."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if key not in fields:
        raise ConfigError(f"unknown config key {key!r}")
    value = _coerce(key, raw, typing.get_type_hints(cls)[key])
    _validate(fields[key], value)
    return value


def key_type(cls: type[Any], key: str) -> type:
    """The scalar type of ``cls``'s config key ``key`` (int for ``int | None``)."""
    return _base_type(typing.get_type_hints(cls)[key])[0]


def reference(cls: type[Any]) -> list[tuple[str, str, Any, str]]:
    """(key, type, default, help) for every key: the source of the generated config reference."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        check: Check | None = f.metadata.get("check")
        base, _ = _base_type(hints[f.name])
        rows.append((f.name, base.__name__, f.default, check.help if check else ""))
    return rows
