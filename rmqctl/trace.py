"""queryMsgTraceById (mqadmin's name): a message's trace as a timeline."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from client.errors import BrokerError
from client.lookup import Lookup
from client.trace import TraceStep, query_trace
from protocol.codes import ResponseCode
from protocol.trace import (
    TRACE_TOPIC,
    EndRecord,
    EndTransactionRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
)
from rmqctl.common import (
    CommandError,
    Settings,
    Spinner,
    addresses_option,
    emit,
    pass_settings,
    run,
    table,
)

#: a timeline row's columns (rmq-console's trace table has the same)
TRACE_HEADERS = ("TIME (UTC)", "STEP", "GROUP", "ATTEMPT", "COST MS", "OUTCOME", "WHERE", "BY")


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def step_doc(step: TraceStep) -> dict[str, Any]:
    """One record as JSON: its type, time, who wrote it, and its own fields."""
    r = step.record
    doc: dict[str, Any] = {
        "type": str(r.type),
        "timestamp": r.timestamp,
        "storedAt": step.stored_at,
    }
    for name in r.__slots__:
        value = getattr(r, name)
        if name in ("timestamp", "kind"):
            continue
        key = "".join(w if i == 0 else w.capitalize() for i, w in enumerate(name.split("_")))
        doc[key] = int(value) if isinstance(value, int) and not isinstance(value, bool) else value
    return doc


def trace_row(r: TraceRecord) -> tuple[object, ...]:
    """One record as a timeline row (:data:`TRACE_HEADERS`)."""
    when = _when(r.timestamp)
    if isinstance(r, PubRecord):
        where = f"{r.topic} q{r.queue_id}@{r.queue_offset}" if r.queue_id >= 0 else r.topic
        outcome = "stored" if r.success else "failed"
        if r.traceparent:
            outcome += f" traceparent={r.traceparent}"
        return (when, "send", r.group or "-", "", r.cost_ms, outcome, f"{where} on {r.store_host}",
                f"{r.source} {r.client_host}".strip())  # fmt: skip
    if isinstance(r, SubBeforeRecord):
        outcome = "handed out"
        if r.traceparent:
            outcome += f" traceparent={r.traceparent}"
        return (when, "deliver", r.group, r.retry_times + 1, "", outcome, r.request_id,
                f"{r.source} {r.client_host}".strip())  # fmt: skip
    if isinstance(r, SubAfterRecord):
        outcome = "acked" if r.success else f"failed ({r.context_code.name})"
        return (when, "consumed", r.group, "", r.cost_ms, outcome, r.request_id,
                f"{r.source} {r.client_host}".strip())  # fmt: skip
    if isinstance(r, EndTransactionRecord):
        return (when, "transaction", r.group, "", "", r.state, r.topic, r.source)
    assert isinstance(r, EndRecord)
    labels = {"Retry": "retry", "DLQ": "dead letter", "Recall": "recall", "Delay": "scheduled"}
    return (when, labels.get(str(r.kind), str(r.kind)), r.group or "-", r.attempt or "",
            "", r.detail or "-", r.topic, r.source)  # fmt: skip


def render(steps: list[TraceStep]) -> str:
    return table(TRACE_HEADERS, [trace_row(s.record) for s in steps])


def traces_off(trace_topic: str) -> str:
    """What queryMsgTraceById says when the trace topic does not exist."""
    return (
        f"no trace found: message traces are off on this cluster (topic {trace_topic} does "
        "not exist: no broker has trace_enabled, and no client traced to it; docs/traces.md)"
    )


@click.command("queryMsgTraceById", short_help="Show a message's trace (its timeline).")
@addresses_option
@click.option("-i", "--msg-id", "msg_id", required=True, metavar="MSGID", help="Message id.")
@click.option(
    "--trace-topic",
    default=TRACE_TOPIC,
    show_default=True,
    metavar="TOPIC",
    help="The trace topic (the brokers' trace_topic).",
)
@pass_settings
def query_msg_trace_by_id(
    settings: Settings, addresses: str, msg_id: str, trace_topic: str
) -> None:
    """Show the trace of message MSGID: its send, each delivery to each consumer group (attempt,
    handed out, acked or failed, how long it took), its retries, dead letter, recall,
    transaction end or scheduled delivery, in time order. Records come from the brokers
    (trace_enabled) and from clients sending or consuming with trace on (sendMessage --trace,
    consumeMessage --trace, the SDK's trace=True), found through the trace topic's key index.

    Prints {"msgId", "traceTopic", "steps": [{"type", "timestamp", "storedAt", ...the record's
    fields}]} with --json. Finding no record is an error (exit status 1); so is a trace topic
    that does not exist ("no trace found: message traces are off on this cluster ...").
    """
    errors: list[str] = []

    async def work() -> list[TraceStep]:
        async with Spinner(f"searching {trace_topic} for {msg_id}"), Lookup(addresses) as lookup:
            try:
                return await query_trace(lookup, msg_id, topic=trace_topic, errors=errors)
            except BrokerError as exc:
                if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                    raise
                raise CommandError(traces_off(trace_topic)) from None

    steps = run(work())
    if not steps:
        raise CommandError(
            f"no trace of message {msg_id} in {trace_topic}"
            + (f" ({'; '.join(errors)})" if errors else "")
        )
    doc = {"msgId": msg_id, "traceTopic": trace_topic, "steps": [step_doc(s) for s in steps]}
    emit(settings, doc, lambda: render(steps))
    if errors:
        raise CommandError("; ".join(errors))
