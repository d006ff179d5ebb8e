"""The background scrub (issue 31): the broker re-reads its flushed CommitLog records at
``scrub_bytes_per_s`` (0: off, read at every tick so a change applies at once), checks each one
(``StoreRepair.scrub``, ``storage.scrub``) and has what fails repaired from the group's replicas
(:class:`~broker.repair.fetch.RecordRepair`), before a consumer meets it. Every tick it also
starts the repair of any damage the store knows of that no repair is running for (found at
start-up by recovery, by a read or a replay), as soon as a replica is there to ask, whatever
the rate (0 too). Its position is saved every :data:`SAVE_EVERY_S` and at the end of each
pass, so a restart carries on from there. At
the end of each pass one sealed key index file is checked too (in turn); one that fails is
rebuilt from the CommitLog (``StoreRepair.check_index``), in slices of
:data:`INDEX_SLICE_BYTES` with the loop served between them, at most :data:`INDEX_BUDGET_S`
of each tick (``StoreRepair.rebuild_index``; a lookup by key meanwhile catches up whole). A pass starts no sooner than
``scrub_interval_hours`` after the previous one started: between passes the scrub rests (an idle
broker with a small log would otherwise re-read it several times a second, for nothing).

Counted in :attr:`Scrubber.counts` (the metrics ``rmq_broker_scrub_*_total``): bytes scrubbed,
damage found, repaired, unrepairable (no replica holds it intact: the damage stays, reads of it
answer MESSAGE_CORRUPT, and the alert ``RmqUnrepairableDamage`` fires).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Final

import structlog

from broker.metrics import BrokerMetrics
from broker.repair.fetch import RecordRepair
from storage.errors import StoreError
from storage.store_repair import StoreRepair

__all__ = ["SCRUB_KINDS", "Scrubber", "export_metrics", "export_repair_metrics"]

log = structlog.get_logger(__name__)

TICK_S: Final = 0.1
"""How often a slice is read: a slice is ``scrub_bytes_per_s * TICK_S`` bytes."""
SAVE_EVERY_S: Final = 10.0
INDEX_SLICE_BYTES: Final = 1 << 20
"""CommitLog bytes a slice of a key index rebuild indexes at once, on the loop."""
INDEX_BUDGET_S: Final = 0.05
"""The most of a tick a key index rebuild takes, in slices."""
SCRUB_KINDS: Final = ("bytes", "damage_found", "repaired", "unrepairable", "index_rebuilt")


_METRIC_DOCS: Final = {
    "bytes": "CommitLog bytes the background scrub read and checked",
    "damage_found": "Damaged CommitLog records the scrub found (once per offset)",
    "repaired": "Damaged records the scrub found and had repaired from a replica",
    "unrepairable": "Damaged records the scrub found that no replica holds intact",
    "index_rebuilt": "Key index files the scrub found failing their CRC, rebuilt",
}


_REPAIR_METRICS: Final = {
    "repaired": (
        "rmq_broker_records_repaired",
        "CommitLog records that failed their checks, written back from another replica",
    ),
    "unrepairable": (
        "rmq_broker_records_unrepairable",
        "Repairs of a damaged CommitLog record that no replica could make",
    ),
    "answers_refused": (
        "rmq_broker_repair_answers_refused",
        "Replicas' repair answers refused by the checks (bytes failing their CRC, another "
        "epoch, an offset beyond the replica's epoch)",
    ),
}


def export_repair_metrics(metrics: BrokerMetrics, repair: RecordRepair | None) -> None:
    """``rmq_broker_records_repaired_total`` and its two siblings, read from ``repair.counts``
    at scrape time; 0 on a broker with no replica to repair from (``repair`` None), so every
    broker exports the same series."""
    counts = dict.fromkeys(_REPAIR_METRICS, 0) if repair is None else repair.counts
    for kind, (name, doc) in _REPAIR_METRICS.items():
        metrics.counter_fn(name, doc, partial(counts.__getitem__, kind))


def export_metrics(metrics: BrokerMetrics, scrubber: Scrubber) -> None:
    """``rmq_broker_scrub_<kind>_total``, read from ``scrubber.counts`` at scrape time."""
    counts = scrubber.counts
    for kind in SCRUB_KINDS:
        metrics.counter_fn(
            f"rmq_broker_scrub_{kind}", _METRIC_DOCS[kind], partial(counts.__getitem__, kind)
        )


class Scrubber:
    """Loop thread only."""

    def __init__(
        self,
        repairs: StoreRepair,
        repair: RecordRepair | None,
        rate: Callable[[], int],
        interval_s: Callable[[], float],
    ) -> None:
        self._repairs = repairs
        self._repair = repair
        self._rate = rate
        self._interval_s = interval_s
        self.counts: dict[str, int] = dict.fromkeys(SCRUB_KINDS, 0)
        """Bytes read; damage found, repaired and unrepairable, each once per offset."""
        self._found: set[int] = set()
        self._unrepairable: set[int] = set()
        self.damaged_records = 0
        """The damaged CommitLog records the store holds that no replica could repair
        (``unrepairable()``: a repair was tried and failed), kept every tick for the heartbeats
        (read on their thread) and the controllers' elections."""

    async def run(self) -> None:
        saved_at = pass_began = time.monotonic()
        resting = False
        credit = 0.0
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._heal()
                await self._rebuild_index()
            except StoreError:  # the store closed under us (stopping)
                return
            if resting:
                if time.monotonic() - pass_began < self._interval_s():
                    continue
                resting = False
                pass_began = time.monotonic()
            rate = self._rate()
            if rate <= 0:
                credit = 0.0
                continue
            credit = min(credit + rate * TICK_S, rate * 1.0)
            if credit < 1:
                continue
            try:
                step = self._repairs.scrub(int(credit))
            except StoreError:  # the store closed under us (stopping)
                return
            credit -= step.scanned
            self.counts["bytes"] += step.scanned
            for offset, size in step.damage:
                await self._handle(offset, size)
            now = time.monotonic()
            if step.wrapped or now - saved_at >= SAVE_EVERY_S:
                saved_at = now
                try:
                    await asyncio.get_running_loop().run_in_executor(None, self._repairs.save_scrub)
                except (OSError, StoreError) as exc:
                    log.warning("scrub position not saved", error=str(exc))
            if step.wrapped:
                position, passes = self._repairs.scrub_position
                rest_s = max(0.0, self._interval_s() - (time.monotonic() - pass_began))
                log.info(
                    "scrub pass ended", passes=passes, position=position, next_in_s=round(rest_s)
                )
                if self._repairs.check_index() is not None:  # logged by the index
                    self.counts["index_rebuilt"] += 1
                resting, credit = True, 0.0

    async def _rebuild_index(self) -> None:
        """Go on with a key index rebuild ``check_index`` began: slices of
        :data:`INDEX_SLICE_BYTES`, yielding to the loop between them, for at most
        :data:`INDEX_BUDGET_S` a tick (the loop serves requests meanwhile)."""
        began = time.monotonic()
        while not self._repairs.rebuild_index(INDEX_SLICE_BYTES):
            if time.monotonic() - began >= INDEX_BUDGET_S:
                return
            await asyncio.sleep(0)

    def _heal(self) -> None:
        """Have every damage the store knows of repaired from a replica as soon as one is there
        to ask, whoever found it (recovery at start-up, a read, a replay, the scrub): a repair
        not running is started, one that failed is tried again after ``RETRY_AFTER_S``
        (``RecordRepair.start``). Then :attr:`damaged_records` counts what no replica could
        repair."""
        repair = self._repair
        if repair is not None and repair.can_ask():
            for offset, _size in self._repairs.unrepaired():
                repair.start(offset)
        self.damaged_records = len(self._repairs.unrepairable())

    async def _handle(self, offset: int, size: int) -> None:
        if offset not in self._found:
            self._found.add(offset)
            self.counts["damage_found"] += 1
        repairing = None if self._repair is None else self._repair.start(offset)
        repaired = repairing is not None and (await repairing).ok
        if repaired:
            self._found.discard(offset)
            self._unrepairable.discard(offset)
            self.counts["repaired"] += 1
        elif offset not in self._unrepairable:
            self._unrepairable.add(offset)
            self.counts["unrepairable"] += 1
