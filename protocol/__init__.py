"""Every wire format of the system, as pure encode/decode code with no sockets.

- :mod:`protocol.remoting`: the remoting frame (client, broker, controller).
- :mod:`protocol.codes`: request and response codes.
- :mod:`protocol.message`: the self-describing message record (CommitLog and pull bodies).
- :mod:`protocol.fields`: typed access to request header fields.
- :mod:`protocol.pull`: PULL_MESSAGE and the queue offset queries, requests and answers.
"""
