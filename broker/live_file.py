"""A broker's live config changes, kept in its data directory: ``<data_dir>/config/liveConfig.json``
(beside ``topics.json``, ``consumerOffset.json`` and ``owner.json``). The broker never writes its
config file: in the documented deployment it cannot (root-owned, ProtectSystem=strict).

The payload of a small file (:mod:`storage.small_file`: checksummed, written to a temp file,
fsynced, renamed, the directory fsynced, the previous copy kept as ``.bak``)::

    {"version": 1,
     "entries": {key: {"value": v, "startValue": v, "setAt": "2026-11-29T08:30:00Z",
                       "setBy": "10.0.0.7:53122"}}}

One entry per key changed live: its value, the value the broker had been started with when the
change was made (from its config file and flags: the start value), the UTC time and the peer
address that asked. The file belongs to one broker: slaves copy topics, offsets, groups and the
DLQ ledger from their master (:mod:`broker.replicas.config_sync`), never this file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from protocol.broker_requests.broker_config import ConfigValue
from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic

__all__ = ["NAME", "LiveEntry", "LiveFileError", "live_file_path", "read_entries", "write_entries"]

NAME: Final = "liveConfig.json"
VERSION: Final = 1
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True, slots=True)
class LiveEntry:
    """One key changed live: its value, its start value then, when (UTC) and by whom."""

    value: ConfigValue
    start_value: ConfigValue
    set_at: str
    set_by: str

    def to_dict(self) -> dict[str, ConfigValue]:
        return {
            "value": self.value,
            "startValue": self.start_value,
            "setAt": self.set_at,
            "setBy": self.set_by,
        }


class LiveFileError(Exception):
    """The live changes file cannot be read: one line naming it and what to do."""


def live_file_path(data_dir: Path) -> Path:
    return Path(data_dir) / "config" / NAME


def _entry(raw: Any) -> LiveEntry:
    if not isinstance(raw, dict):
        raise ValueError("an entry is not a map")
    value, start = raw["value"], raw["startValue"]
    set_at, set_by = raw["setAt"], raw["setBy"]
    if not isinstance(value, _SCALARS) or not isinstance(start, _SCALARS):
        raise ValueError("a value is not a scalar")
    if not isinstance(set_at, str) or not isinstance(set_by, str):
        raise ValueError("setAt and setBy must be text")
    return LiveEntry(value, start, set_at, set_by)


def read_entries(path: Path) -> dict[str, LiveEntry]:
    """The entries of ``path`` ({} when it does not exist); :class:`LiveFileError` when it (and
    its ``.bak``) cannot be read or is not a live changes file."""
    advice = f"move {path.name} and {path.name}.bak aside to start with the config file's values"
    try:
        raw = read_atomic(path)
    except NotADirectoryError:
        return {}  # no data directory there: the broker refuses to start on it, saying so
    except StoreError as exc:
        raise LiveFileError(f"live config changes file unreadable: {exc}; {advice}") from None
    except OSError as exc:
        raise LiveFileError(f"cannot read {path}: {exc.strerror or exc}; {advice}") from None
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError("not version 1")
        entries = doc["entries"]
        if not isinstance(entries, dict):
            raise ValueError("entries is not a map")
        return {str(key): _entry(raw_entry) for key, raw_entry in entries.items()}
    except (ValueError, KeyError, TypeError):
        raise LiveFileError(f"{path} is not a live config changes file; {advice}") from None


def write_entries(path: Path, entries: Mapping[str, LiveEntry]) -> None:
    """Durably replace ``path`` with ``entries`` (an empty map too); raises OSError."""
    doc = {
        "version": VERSION,
        "entries": {key: entries[key].to_dict() for key in sorted(entries)},
    }
    write_atomic(path, json.dumps(doc, sort_keys=True).encode())
