"""RecordSizer encodes a message with properties but no KEYS/TAGS among them without copying
its dict (every idempotent send has one, issue 29): the same bytes as all_properties() gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.message import PROP_KEYS, PROP_TAGS, Message, encode_properties
from storage.queue_write import RecordSizer

texts = st.text(alphabet="abcXYZ019 -_.", max_size=12)


@given(
    st.dictionaries(texts.filter(bool), texts, max_size=4),
    texts,
    texts,
    st.booleans(),
)
def test_the_properties_encode_as_all_properties_does(
    props: dict[str, str], keys: str, tags: str, with_reserved: bool
) -> None:
    if with_reserved:
        props = {**props, PROP_KEYS: "k0", PROP_TAGS: "t0"}
    sizer = RecordSizer(4 * 1024 * 1024)
    plain = Message(topic="T", body=b"x", keys=keys, tags=tags)
    msg = Message(topic="T", body=b"x", keys=keys, tags=tags, properties=props)
    batch = sizer.size(b"T", [plain, msg, msg])  # the keys/tags encoding cached, then reused
    expected = encode_properties(msg.all_properties())
    assert batch.props[1] == batch.props[2] == expected
    assert batch.props[0] == encode_properties(plain.all_properties())
