"""The traffic job: messages per second by topic, queue and broker group, per hour and per day,
and a queue re-balance plan.

Rates are messages in a window divided by the window's length (3600 s for an hour, 86400 s for a
day; windows are UTC hours and days). The first and last windows of a range are usually partial,
so their rates read low. An hourly average hides bursts (15k msg/s for one second is 4 msg/s over
the hour), so each hour also carries its per-second peaks: messages are counted per second, and
the hour reports the p99 second (seconds without messages count as 0) and the busiest second, per
queue and per topic.

The plan uses each topic's *peak hourly* rate on each broker group (capacity is planned for
peaks). A group's load is the sum of its topics' rates. When the spread between the busiest and
the idlest group (every group of the cluster counts, idle ones at 0) is at most the threshold, the
plan says so and moves nothing. Otherwise topics are taken by traffic descending and each is
placed onto the broker group with the least traffic placed so far (ascending, ties by name), and
every topic whose place differs from where it is now becomes a move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from client import Credentials
from client.admin import Admin
from client.errors import ClientError
from pipeline.loop import SyncLoop
from pipeline.options import credentials_option, tls_option
from pipeline.tls import ClientTls, context_of
from remoting.errors import RemotingError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_THRESHOLD = 5000.0
HOUR = 3600
DAY = 86400


@dataclass(frozen=True, slots=True)
class TrafficSpec:
    controllers: str
    topics: tuple[str, ...]
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    threshold: float = DEFAULT_THRESHOLD
    #: the source options of every connection: accessKey/secretKey, tls/caFile (checked)
    connection: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class TrafficReport:
    #: per queue and hour: messages, msgPerSec (the hour's average), p99MsgPerSec, peakMsgPerSec
    hourly: DataFrame
    #: per topic and hour, all queues together: the same columns
    topics_hourly: DataFrame
    daily: DataFrame
    plan: dict[str, Any]


def read_topics(spark: SparkSession, spec: TrafficSpec) -> DataFrame:
    """The (topic, brokerName, queueId, storeTimestamp) of every message in the range: one
    read of the topic (``topic``), or of them all (``topics``), whose JSON positions are then
    keyed by topic as the source's are (``{"orders": {"broker-a": {"0": 42}}}``)."""
    topics = spec.topics
    key, value = ("topic", topics[0]) if len(topics) == 1 else ("topics", ",".join(topics))
    return (
        spark.read.format("rmq")
        .option("controllers", spec.controllers)
        .option(key, value)
        .option("startingOffsets", spec.starting_offsets)
        .option("endingOffsets", spec.ending_offsets)
        .options(**dict(spec.connection))
        .load()
        .select("topic", "brokerName", "queueId", "storeTimestamp")
    )


def per_window(df: DataFrame, length: int, name: str) -> DataFrame:
    """Messages and msg/s per (topic, brokerName, queueId, window of ``length`` seconds)."""
    from pyspark.sql import functions as F

    window = F.window("storeTimestamp", f"{length} seconds")
    counted = df.groupBy("topic", "brokerName", "queueId", window.alias("w")).agg(
        F.count(F.lit(1)).alias("messages")
    )
    start = F.col("w.start")
    if name == "day":
        tz = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
        start = F.date_format(F.to_utc_timestamp(start, tz), "yyyy-MM-dd")
    return counted.select(
        "topic",
        "brokerName",
        "queueId",
        start.alias(name),
        "messages",
        (F.col("messages") / F.lit(float(length))).alias("msgPerSec"),
    ).orderBy("topic", "brokerName", "queueId", name)


#: the rank from the top of the p99 second of an hour (nearest rank: 1% of 3600 seconds)
P99_RANK = 36


def per_hour_with_peaks(df: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Per ``keys`` and UTC hour: messages, the hourly average msg/s, and the per-second peaks:
    ``p99MsgPerSec`` (the rate 99% of the hour's 3600 seconds stay at or below; seconds without
    messages count as 0, so it is 0 unless more than 36 seconds saw messages) and
    ``peakMsgPerSec`` (the busiest second)."""
    from pyspark.sql import functions as F

    second = F.window("storeTimestamp", "1 second").start
    per_second = df.groupBy(*keys, second.alias("second")).agg(F.count(F.lit(1)).alias("n"))
    hour = F.window("second", f"{HOUR} seconds").start
    grouped = per_second.groupBy(*keys, hour.alias("hour")).agg(
        F.sum("n").alias("messages"),
        F.max("n").alias("peak"),
        F.sort_array(F.collect_list("n"), asc=False).alias("desc"),
    )
    p99 = F.when(F.size("desc") >= P99_RANK, F.element_at("desc", P99_RANK)).otherwise(F.lit(0))
    return grouped.select(
        *keys,
        "hour",
        "messages",
        (F.col("messages") / F.lit(float(HOUR))).alias("msgPerSec"),
        p99.cast("double").alias("p99MsgPerSec"),
        F.col("peak").cast("double").alias("peakMsgPerSec"),
    ).orderBy(*keys, "hour")


def peak_rates(hourly: DataFrame) -> dict[tuple[str, str], float]:
    """(topic, broker group) -> the peak hourly msg/s of that topic on that group."""
    from pyspark.sql import functions as F

    per_group = hourly.groupBy("topic", "brokerName", "hour").agg(F.sum("messages").alias("n"))
    peaks = per_group.groupBy("topic", "brokerName").agg(F.max("n").alias("peak")).collect()
    return {(r["topic"], r["brokerName"]): float(r["peak"]) / HOUR for r in peaks}


def broker_groups(
    controllers: str,
    timeout: float = 5.0,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> list[str]:
    """Every broker group of the cluster(s) the controllers know."""

    async def ask() -> list[str]:
        async with Admin(controllers, timeout, credentials, context_of(tls)) as admin:
            info = await admin.cluster_info()
        return sorted({b.broker_name for members in info.values() for b in members})

    try:
        with SyncLoop() as loop:
            return loop.run(ask())
    except (ClientError, RemotingError):
        return []


def topic_queues(
    controllers: str,
    topics: Sequence[str],
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> dict[tuple[str, str], int]:
    """(topic, broker group) -> queue count, from the routes."""
    # here, not at the top: the snapshot needs numpy (pipeline.logical), and rmq-pipeline
    # imports this module before it checks that the spark extra is installed
    from pipeline.snapshot import snapshot

    out: dict[tuple[str, str], int] = {}
    for topic in topics:
        route = snapshot(controllers, topic, 5.0, credentials, tls).route
        for b in route.brokers:
            out[(topic, b.broker_name)] = b.queues
    return out


def rebalance_plan(
    rates: Mapping[tuple[str, str], float],
    groups: Sequence[str],
    queues: Mapping[tuple[str, str], int],
    threshold: float = DEFAULT_THRESHOLD,
) -> dict[str, Any]:
    """The plan as a JSON-able document (see the module docstring for the rule).

    ``rates``: (topic, group) -> msg/s; ``groups``: every broker group that may take topics;
    ``queues``: (topic, group) -> queue count today (a moved topic keeps its total).
    """
    all_groups = sorted(set(groups) | {g for _, g in rates} | {g for _, g in queues})
    before = {g: 0.0 for g in all_groups}
    topic_rate: dict[str, float] = {}
    placed_on: dict[str, set[str]] = {}
    for (topic, group), rate in rates.items():
        before[group] += rate
        topic_rate[topic] = topic_rate.get(topic, 0.0) + rate
    for topic, group in queues:
        topic_rate.setdefault(topic, 0.0)
        placed_on.setdefault(topic, set()).add(group)
    for topic, group in rates:
        placed_on.setdefault(topic, set()).add(group)
    spread = _spread(before)
    doc: dict[str, Any] = {
        "threshold": threshold,
        "rate": "peak hourly msg/s",
        "spreadBefore": round(spread, 3),
        "groupsBefore": _rounded(before),
    }
    if len(all_groups) < 2 or spread <= threshold:
        reason = (
            "fewer than two broker groups"
            if len(all_groups) < 2
            else f"spread {spread:.3f} msg/s is within the threshold {threshold:g}"
        )
        return {"rebalance": False, "reason": reason, **doc, "moves": []}
    after = {g: 0.0 for g in all_groups}
    assignments: dict[str, str] = {}
    for topic in sorted(topic_rate, key=lambda t: (-topic_rate[t], t)):
        target = min(all_groups, key=lambda g: (after[g], g))
        assignments[topic] = target
        after[target] += topic_rate[topic]
    moves = []
    for topic, target in assignments.items():
        current = sorted(placed_on.get(topic, set()))
        if current != [target]:
            moves.append(
                {
                    "topic": topic,
                    "msgPerSec": round(topic_rate[topic], 3),
                    "from": current,
                    "to": target,
                    "queues": sum(queues.get((topic, g), 0) for g in current) or None,
                }
            )
    return {
        "rebalance": True,
        **doc,
        "spreadAfter": round(_spread(after), 3),
        "groupsAfter": _rounded(after),
        "assignments": assignments,
        "moves": moves,
    }


def _spread(load: Mapping[str, float]) -> float:
    return max(load.values()) - min(load.values()) if load else 0.0


def _rounded(load: Mapping[str, float]) -> dict[str, float]:
    return {g: round(v, 3) for g, v in sorted(load.items())}


def run_traffic(spark: SparkSession, spec: TrafficSpec) -> TrafficReport:
    """Hourly and daily rates (lazy DataFrames, cached) and the re-balance plan."""
    if not spec.topics:
        raise ValueError("traffic needs at least one topic")
    df = read_topics(spark, spec).cache()
    hourly = per_hour_with_peaks(df, ("topic", "brokerName", "queueId")).cache()
    topics_hourly = per_hour_with_peaks(df, ("topic",))
    daily = per_window(df, DAY, "day")
    options = dict(spec.connection)
    credentials, tls = credentials_option(options), tls_option(options)
    plan = rebalance_plan(
        peak_rates(hourly),
        broker_groups(spec.controllers, 5.0, credentials, tls),
        topic_queues(spec.controllers, spec.topics, credentials, tls),
        spec.threshold,
    )
    return TrafficReport(hourly=hourly, topics_hourly=topics_hourly, daily=daily, plan=plan)
