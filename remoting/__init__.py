"""Thin asyncio drivers of the remoting codec (:mod:`protocol.remoting`).

- :mod:`remoting.client`: one connection, requests matched to responses by opaque.
- :mod:`remoting.failover`: requests to any of a list of addresses, following the leader.
- :mod:`remoting.server`: accepts connections and dispatches requests to a handler table,
  with bounded in-flight requests and a bounded write buffer per connection.
"""
