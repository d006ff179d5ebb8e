"""Writing a batch to a queue: the two steps of ``MessageStore.put`` that do not touch the queue.

1. :meth:`RecordSizer.size`: each message's encoded properties, born host, record size and tag
   hash (and, for the property filter index, its properties' digest), checked against the
   limits before anything is reserved (a message over ``max_message_bytes`` or properties over
   ``MAX_PROPERTIES_BYTES`` raise :class:`MessageTooLargeError`, having written nothing). Most
   messages carry only keys and tags, so those encodings, their digests and the packed hosts
   are cached.
2. :func:`encode_batch`: the records encoded into the reserved bytes of a CommitLog segment;
   a field out of range leaves no record past the write position.

Reserving the queue offsets and the CommitLog bytes, and advancing both, stay the store's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

from protocol.message import (
    HEAD_SIZE,
    MAX_PROPERTIES_BYTES,
    PROP_KEYS,
    PROP_TAGS,
    Message,
    RecordEncoder,
    encode_properties,
    pack_host,
    tag_hash,
)
from protocol.property_index import SEQ_DIGEST, digest_of_raw
from storage.errors import MessageTooLargeError, StoreError
from storage.segment import Segment

_CACHE_LIMIT: Final = 4096
_K = TypeVar("_K")
_V = TypeVar("_V")


def _remember(cache: dict[_K, _V], key: _K, value: _V) -> _V:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
    return value


@dataclass(slots=True)
class SizedBatch:
    """What :func:`encode_batch` needs of each message, in order, and the batch's size."""

    props: list[bytes] = field(default_factory=list)
    hosts: list[bytes] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    tag_hashes: list[int] = field(default_factory=list)
    total: int = 0
    digests_lo: list[int] = field(default_factory=list)
    """The messages' property digests (:func:`protocol.property_index.digest_of_raw` of their
    encoded properties), when :meth:`RecordSizer.size` was asked for them; else empty."""
    digests_hi: list[int] = field(default_factory=list)

    def __init__(
        self,
        props: list[bytes] | None = None,
        hosts: list[bytes] | None = None,
        sizes: list[int] | None = None,
        tag_hashes: list[int] | None = None,
        total: int = 0,
        digests_lo: list[int] | None = None,
        digests_hi: list[int] | None = None,
    ) -> None:
        # Written out, as protocol.remoting.Frame's is: a native constructor compiled, one
        # per batch put. A list left out is a fresh one, as the default_factory gave.
        self.props = [] if props is None else props
        self.hosts = [] if hosts is None else hosts
        self.sizes = [] if sizes is None else sizes
        self.tag_hashes = [] if tag_hashes is None else tag_hashes
        self.total = total
        self.digests_lo = [] if digests_lo is None else digests_lo
        self.digests_hi = [] if digests_hi is None else digests_hi


class RecordSizer:
    def __init__(self, max_message_bytes: int) -> None:
        self._limit = max_message_bytes
        self._hosts: dict[str, bytes] = {}
        self._tag_props: dict[tuple[str, str], _KeysTags] = {}

    def size(
        self, topic_raw: bytes, messages: Sequence[Message], digests: bool = False
    ) -> SizedBatch:
        """Each message's encoded parts and record size, and with ``digests`` its properties'
        digest (the property filter index's, taken here from the bytes the record will hold
        rather than read back from the record); raises :class:`MessageTooLargeError` for one
        over the limits."""
        fixed = HEAD_SIZE + 4 + len(topic_raw)
        limit = self._limit
        hosts = self._hosts
        tag_props = self._tag_props
        batch = SizedBatch()
        seq_lo, seq_hi = SEQ_DIGEST
        for msg in messages:
            props = msg.properties
            seq = msg.seq_property  # the broker's __PSEQ, encoded (idempotent sends)
            if props:
                if PROP_KEYS in props or PROP_TAGS in props:
                    props_raw = encode_properties(msg.all_properties()) + seq
                    tags_hash = tag_hash(msg.tags)
                else:
                    # The same bytes as all_properties() gives (keys and tags follow the
                    # others), without copying the dict.
                    cached = tag_props.get((msg.keys, msg.tags))
                    if cached is None:
                        cached = self._encode_keys_tags(msg.keys, msg.tags)
                    raw = encode_properties(props)
                    props_raw = raw + seq + cached.raw if seq else raw + cached.raw
                    tags_hash = cached.tag_hash
                if len(props_raw) > MAX_PROPERTIES_BYTES:
                    raise MessageTooLargeError(f"properties exceed {MAX_PROPERTIES_BYTES} bytes")
                if digests:
                    lo, hi = digest_of_raw(props_raw)
                    batch.digests_lo.append(lo)
                    batch.digests_hi.append(hi)
            else:
                # Most messages carry only keys and tags: their encoding repeats.
                cached = tag_props.get((msg.keys, msg.tags))
                if cached is None:
                    cached = self._encode_keys_tags(msg.keys, msg.tags)
                props_raw = cached.raw
                tags_hash = cached.tag_hash
                if seq:
                    # An idempotent send without properties of its own: its __PSEQ first, as
                    # encoding the property in the dict would place it (the stamp's own bytes
                    # when there are no keys or tags: no copy).
                    props_raw = seq + props_raw if props_raw else seq
                    if len(props_raw) > MAX_PROPERTIES_BYTES:
                        raise MessageTooLargeError(
                            f"properties exceed {MAX_PROPERTIES_BYTES} bytes"
                        )
                if digests:
                    if cached.digest_lo < 0:  # not needed before (the filter index was off)
                        cached.digest_lo, cached.digest_hi = digest_of_raw(cached.raw)
                    # The broker's own property, whole (its value is digits and dots, ended
                    # by the separator), before the cached keys and tags: their digest with
                    # the property's presence (only that is digested of __PSEQ).
                    if seq:
                        batch.digests_lo.append(cached.digest_lo | seq_lo)
                        batch.digests_hi.append(cached.digest_hi | seq_hi)
                    else:
                        batch.digests_lo.append(cached.digest_lo)
                        batch.digests_hi.append(cached.digest_hi)
            size = fixed + len(msg.body) + len(props_raw)
            if size > limit:
                raise MessageTooLargeError(f"a {size}-byte record exceeds {limit} bytes")
            host = hosts.get(msg.born_host)
            if host is None:
                host = _remember(hosts, msg.born_host, pack_host(msg.born_host))
            batch.props.append(props_raw)
            batch.hosts.append(host)
            batch.sizes.append(size)
            batch.tag_hashes.append(tags_hash)
            batch.total += size
        return batch

    def _encode_keys_tags(self, keys: str, tags: str) -> _KeysTags:
        props_raw = encode_properties(
            Message(topic="", body=b"", keys=keys, tags=tags).all_properties()
        )
        if len(props_raw) > MAX_PROPERTIES_BYTES:
            raise MessageTooLargeError(f"properties exceed {MAX_PROPERTIES_BYTES} bytes")
        return _remember(self._tag_props, (keys, tags), _KeysTags(props_raw, tag_hash(tags)))


class _KeysTags:
    """A message's keys and tags encoded as its record's properties, their tag hash and their
    digest (:func:`protocol.property_index.digest_of_raw`, taken the first time a put asks for
    digests: a broker without the filter index, whose messages may each have keys of their
    own, never computes it): what messages with the same keys and tags and no other
    properties share."""

    __slots__ = ("digest_hi", "digest_lo", "raw", "tag_hash")

    def __init__(self, raw: bytes, tag_hash: int) -> None:
        self.raw = raw
        self.tag_hash = tag_hash
        self.digest_lo = -1
        """-1: not taken yet (a digest's halves are never negative)."""
        self.digest_hi = -1


def encode_batch(
    encoder: RecordEncoder,
    seg: Segment,
    rel: int,
    topic_raw: bytes,
    queue_id: int,
    first: int,
    messages: Sequence[Message],
    batch: SizedBatch,
    now_ms: int,
) -> tuple[list[int], int]:
    """Encode ``messages`` (queue offsets from ``first``) at ``rel`` in ``seg``, where
    ``batch.total`` bytes were reserved; returns each record's CommitLog offset and the end.
    Raises :class:`StoreError` for a field out of range, with those bytes zeroed again."""
    base = seg.start
    start_rel = rel
    view = seg.view
    encode = encoder.encode_into
    physical_offsets: list[int] = []
    try:
        for i, msg in enumerate(messages):
            physical = base + rel
            rel += encode(
                view,
                rel,
                topic_raw=topic_raw,
                props_raw=batch.props[i],
                body=msg.body,
                queue_id=queue_id,
                queue_offset=first + i,
                physical_offset=physical,
                flag=msg.flag,
                born_timestamp=msg.born_timestamp,
                store_timestamp=now_ms,
                born_host_raw=batch.hosts[i],
            )
            physical_offsets.append(physical)
    except (struct.error, TypeError, ValueError) as exc:
        # A field out of range: leave no record past the write position.
        seg.zero(start_rel, rel + batch.sizes[len(physical_offsets)])
        raise StoreError(f"message cannot be encoded: {exc}") from exc
    return physical_offsets, base + rel
