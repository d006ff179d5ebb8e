"""The key index: CommitLog offsets of messages by key (RocketMQ's IndexFile idea, our format).

:mod:`storage.index.format` is the pure part (layout, hashing, slot arithmetic, key
extraction); :mod:`storage.index.file` one mapped index file; :mod:`storage.index.service` the
files of one store: writing as records are dispatched, recovery, retention and queries.
"""
