"""What a streaming query's progress says about an ``rmq`` source, as the Kafka source reports
it: how many offsets each queue is behind the latest one (avg, max, min).

PySpark's Python streaming sources (Spark 4.3) have no hook for custom metrics in
``StreamingQueryProgress``, so these are computed from the progress Spark keeps anyway: the
source's ``endOffset`` and the ``latestOffset`` the reader reports (``reportLatestOffset``: each
queue's committed end when the batch was planned).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipeline import offsets as ofs
from pipeline.errors import OptionError


def _offsets(value: Any) -> ofs.Offsets | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    try:
        return ofs.from_json(value)
    except OptionError:
        return None


def offsets_behind(source: Mapping[str, Any]) -> dict[str, float] | None:
    """``{"avgOffsetsBehindLatest", "maxOffsetsBehindLatest", "minOffsetsBehindLatest"}`` of one
    source's progress (``query.lastProgress["sources"][0]``); None when it has no latest offset
    (no batch planned yet)."""
    end = _offsets(source.get("endOffset"))
    latest = _offsets(source.get("latestOffset"))
    if end is None or latest is None or not latest:
        return None
    behind = [max(0, last - end.get(mq, last)) for mq, last in latest.items()]
    return {
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
        "maxOffsetsBehindLatest": float(max(behind)),
        "minOffsetsBehindLatest": float(min(behind)),
    }
