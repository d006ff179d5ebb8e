"""The compiled idempotence core (protocol/idempotence.py) decides as its pure-Python source does
(docs/compiled.md): the same hypothesis steps go to a compiled :class:`ProducerStates` and to
one of the ``.py`` loaded beside it (rmqbuild.hook.load_pure), and every answer, the state's
document and its snapshot bytes must be the same; the record property it stamps, the values it
parses and the records it picks out of a log are the same bytes and values, and bad input fails
the same way (error type and message). Skipped in the pure build, as tests/compiled/ is.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import protocol.idempotence as idem_c
import protocol.message as message_c
from rmqbuild import hook
from rmqbuild.modules import COMPILED
from tests.hypothesis_profiles import examples

pytestmark = pytest.mark.skipif(
    not hook.compiled_modules(), reason="the pure build: no compiled module to compare"
)
SETTINGS = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
T = "IdemTopic"


def pure() -> ModuleType:
    return hook.load_pure("protocol.idempotence")


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # compared, not swallowed: the other side must fail the same
        return ("error", f"{type(exc).__name__}: {exc}")


def test_the_idempotence_core_runs_compiled() -> None:
    assert "protocol.idempotence" in COMPILED
    assert not (idem_c.__file__ or "").endswith(".py"), idem_c.__file__
    assert pure().__file__.endswith(".py")


def batch_fields(b: Any) -> tuple[Any, ...] | None:
    if b is None:
        return None
    return (
        b.sequence,
        b.queue_id,
        b.first_queue_offset,
        list(b.physical_offsets),
        b.end_offset,
        b.store_timestamp,
        b.missing,
    )


steps = st.lists(
    st.tuples(
        st.sampled_from(["check", "stored", "next", "replayed", "expire"]),
        st.integers(1, 3),  # producer id
        st.integers(0, 2),  # epoch
        st.integers(0, 1),  # queue
        st.integers(0, 24),  # sequence
        st.integers(1, 3),  # records in the request
        st.integers(0, 200_000),  # now (ms)
    ),
    max_size=120,
)


def run_steps(mod: ModuleType, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Every answer of ``mod``'s ProducerStates to ``ops``, then its document and snapshot."""
    s = mod.ProducerStates(expiry_ms=60_000, max_windows=5, window=4)
    out: list[Any] = []
    offset = 0
    for kind, pid, epoch, q, sequence, n, now in ops:
        seq = mod.ProducerSeq(pid, epoch, sequence)
        offsets = list(range(offset, offset + n))
        offset += n
        if kind == "check":
            d = s.check(T, q, seq)
            out.append((d.verdict.value, batch_fields(d.batch), d.gap, d.reason))
        elif kind == "stored":
            d = s.check(T, q, seq)
            if d.verdict.value == "new":
                b = mod.StoredBatch(sequence, q, offsets[0], offsets, offset, now)
                s.stored(T, q, seq, b, now)
            out.append(d.verdict.value)
        elif kind == "next":
            w = s.next_window(T, q, seq)
            out.append(None if w is None else (w.head, [b.sequence for b in w.batches], w.floor))
            if w is not None:
                s.stored_next(w, pid, sequence, q, offsets[0], offsets, 0, now)
        elif kind == "replayed":
            rseq = mod.RecordSeq(seq, n - 1, n)
            s.replayed(
                T,
                q,
                rseq,
                physical_offset=offset,
                size=10,
                queue_offset=-1 if n == 2 else offset,
                store_timestamp=now,
            )
        else:
            out.append(s.expire(now))
        out.append((s.producers, s.windows, s.expired))
    doc = s.to_document()
    out.append(doc)
    out.append(mod.encode_snapshot(offset, doc))
    again = mod.ProducerStates.from_document(doc, expiry_ms=60_000, max_windows=5, window=4)
    out.append(again.to_document())
    return out


@SETTINGS
@given(steps)
def test_the_states_decide_alike(ops: list[tuple[Any, ...]]) -> None:
    assert run_steps(idem_c, ops) == run_steps(pure(), ops)


texts = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)))


@SETTINGS
@given(
    st.lists(st.dictionaries(texts.filter(bool), texts, max_size=2), min_size=1, max_size=4),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.booleans(),
)
def test_stamps_are_the_same_bytes(
    props: list[dict[str, str]], pid: int, epoch: int, sequence: int, with_head: bool
) -> None:
    def stamped(mod: ModuleType) -> list[tuple[bytes, dict[str, str]]]:
        msgs = [message_c.Message(topic=T, body=b"b", properties=dict(p)) for p in props]
        head = mod.seq_head(pid, epoch) if with_head else b""
        mod.stamp(msgs, mod.ProducerSeq(pid, epoch, sequence), head)
        return [(m.seq_property, m.properties) for m in msgs]

    got = stamped(idem_c)
    assert got == stamped(pure())
    # a message without properties carries exactly what the dict would encode
    for (raw, own), p in zip(got, props, strict=True):
        if not p:
            assert raw == message_c.encode_properties(
                {idem_c.PROP_PRODUCER_SEQ: raw[len(idem_c.SEQ_PROPERTY_HEAD) : -1].decode()}
            )
            assert own == {}


@SETTINGS
@given(
    st.one_of(
        st.text(max_size=40),
        st.tuples(*(st.integers(-2, 2**64) for _ in range(5))).map(
            lambda t: ".".join(str(x) for x in t)
        ),
    ),
    st.dictionaries(
        st.sampled_from(["producerId", "producerEpoch", "sequence", "other"]),
        st.one_of(st.none(), st.booleans(), st.integers(-1, 2**64), st.text(max_size=3)),
    ),
)
def test_parsing_and_checks_fail_alike(value: str, header: dict[str, Any]) -> None:
    p = pure()
    assert repr(outcome(idem_c.parse_record_seq, value)) == repr(outcome(p.parse_record_seq, value))
    assert repr(outcome(idem_c.ProducerSeq.parse, header)) == repr(
        outcome(p.ProducerSeq.parse, header)
    )


documents = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 2**64), st.text(max_size=4)),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


@SETTINGS
@given(documents)
def test_bad_documents_fail_alike(doc: Any) -> None:
    def read(mod: ModuleType) -> Any:
        return mod.ProducerStates.from_document(doc, expiry_ms=1, max_windows=1).to_document()

    assert outcome(read, idem_c) == outcome(read, pure())


@SETTINGS
@given(
    st.lists(st.tuples(st.booleans(), st.binary(max_size=40)), min_size=1, max_size=5),
    st.binary(max_size=30),
)
def test_sequenced_records_alike(items: list[tuple[bool, bytes]], garbage: bytes) -> None:
    enc = message_c.RecordEncoder("10.0.0.1:10911")
    log = b""
    for i, (sequenced, body) in enumerate(items):
        props = {idem_c.PROP_PRODUCER_SEQ: f"7.0.{i}.0.1"} if sequenced else {}
        log += enc.encode(
            message_c.Message(topic=T, body=body, properties=props),
            queue_id=0,
            queue_offset=i,
            physical_offset=len(log),
            store_timestamp=1,
        )

    def picked(mod: ModuleType, raw: bytes) -> Any:
        return [(r.physical_offset, r.body, r.producer_seq) for r in mod.sequenced_records(raw)]

    assert outcome(picked, idem_c, log) == outcome(picked, pure(), log)
    assert outcome(picked, idem_c, log + garbage) == outcome(picked, pure(), log + garbage)
