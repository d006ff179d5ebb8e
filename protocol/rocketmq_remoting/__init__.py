"""RocketMQ's own remoting protocol, the classic clients' wire format: pure codecs, no sockets.

- :mod:`~protocol.rocketmq_remoting.frame`: the RemotingCommand frame (JSON and binary headers),
  the stream splitter and the one error type for bad frames.
- :mod:`~protocol.rocketmq_remoting.codes`: RocketMQ's request, response and language codes.
- :mod:`~protocol.rocketmq_remoting.properties`: the ``name\\x01value\\x02`` properties string.
- :mod:`~protocol.rocketmq_remoting.message_decoder`: the stored-message layout of pull answers
  and the SEND_BATCH_MESSAGE body.
- :mod:`~protocol.rocketmq_remoting.route`: the NameServer's route, cluster and topic-list JSON.
- :mod:`~protocol.rocketmq_remoting.headers`: typed request and answer headers of the broker
  requests producers and consumers use (``extFields`` in RocketMQ's field names).
- :mod:`~protocol.rocketmq_remoting.bodies`: their JSON bodies (heartbeat, consumer list, lock
  batch).

docs/protocol.md ("RocketMQ remoting protocol") describes the layouts.
"""
