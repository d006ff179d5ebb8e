"""Which broker group a data directory belongs to: ``<data_dir>/config/owner.json``.

Written at the first start on a directory (checksummed, with a ``.bak``, see
:mod:`storage.small_file`)::

    {"version": 1, "owner": {"cluster": "DefaultCluster", "brokerName": "broker-a"}}

A broker started on a directory that records another cluster or group name must not serve it:
the CommitLog, topics and broker id there are another group's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic

VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class DataDirOwner:
    cluster: str
    broker_name: str

    def __str__(self) -> str:
        return f"broker group {self.broker_name!r} of cluster {self.cluster!r}"


class DataDirOwnerError(StoreError):
    """The data directory belongs to another broker group, or its owner file is unreadable."""


def owner_path(data_dir: Path) -> Path:
    return Path(data_dir) / "config" / "owner.json"


def read_owner(data_dir: Path) -> DataDirOwner | None:
    """The recorded owner, or None when none was recorded yet."""
    path = owner_path(data_dir)
    raw = read_atomic(path)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        owner = doc["owner"]
        return DataDirOwner(str(owner["cluster"]), str(owner["brokerName"]))
    except (ValueError, KeyError, TypeError):
        raise DataDirOwnerError(f"{path} is not a data directory owner file") from None


def claim(data_dir: Path, me: DataDirOwner) -> None:
    """Record ``me`` as the owner of ``data_dir`` if nobody is recorded yet; raises
    :class:`DataDirOwnerError` naming both when another owner is."""
    recorded = read_owner(data_dir)
    if recorded is None:
        doc = {"version": VERSION, "owner": {"cluster": me.cluster, "brokerName": me.broker_name}}
        write_atomic(owner_path(data_dir), json.dumps(doc, sort_keys=True).encode())
        return
    if recorded != me:
        raise DataDirOwnerError(
            f"data directory {data_dir} belongs to {recorded}, not to {me} (this broker's "
            f"cluster and broker_name); start it with those names or give it another data_dir"
        )
