"""storage package: everything the broker and controllers keep on disk.

The broker's message store (``store.MessageStore``: appends, reads, lookups) is built from one
module per concern: ``store_config``, ``store_files`` (the files' lifecycle: open with recovery,
flush, checkpoint, truncation, close), ``segment`` (pre-allocated or sparse mapped files), ``commitlog``,
``consumequeue`` / ``queues``, ``dispatch`` (record validation and ConsumeQueue replay, shared by
recovery and replication), ``recovery``, ``retention``, ``checkpoint``, ``tracker`` (what the
next flush must fsync);
``small_file`` and ``config_files`` hold the small atomic files.
"""
