"""MsgIdMaker formats a record's id from the host's hex and the offset's digits: the same ids
make_msg_id packs, for one record and for a batch (any offset, negative ones included), and
parse_msg_id reads them back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol.message import MsgIdMaker, make_msg_id, parse_msg_id

hosts = st.sampled_from(("127.0.0.1:10911", "10.255.0.7:1", "not-an-ip:80", "[::1]:9876", ""))
offsets = st.integers(-(2**63), 2**63 - 1)


@given(hosts, st.lists(offsets, max_size=70))
def test_ids_are_the_packed_ones(host: str, physical_offsets: list[int]) -> None:
    make = MsgIdMaker(host)
    expected = tuple(make_msg_id(host, offset) for offset in physical_offsets)
    assert make.many(physical_offsets) == expected
    assert tuple(make(offset) for offset in physical_offsets) == expected


def test_an_id_reads_back() -> None:
    make = MsgIdMaker("10.0.0.7:4242")
    assert parse_msg_id(make(123456789)) == ("10.0.0.7:4242", 123456789)
    assert make.many([0, 2**63 - 1]) == (
        make_msg_id("10.0.0.7:4242", 0),
        make_msg_id("10.0.0.7:4242", 2**63 - 1),
    )
