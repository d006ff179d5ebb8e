"""The controllers' requests and answers, one typed codec per request code: frozen dataclasses
with ``parse(header, body)`` and ``encode() -> (header, body)``, used by both ends (the
controllers' handlers in controller/service/, the broker, rmqctl). Pure: no sockets, no clock.

A missing or mistyped field raises :class:`~protocol.fields.FieldError` (answered BAD_REQUEST);
a value the controller refuses raises its subclass
:class:`~protocol.controller_requests.base.InvalidRequest`, which names the response code.

Modules, by family: :mod:`.brokers` (broker ids, registration, CLEAN_BROKER_DATA), :mod:`.groups`
(elections, the SyncStateSet, a group's metadata), :mod:`.heartbeats` (BROKER_HEARTBEAT),
:mod:`.topics` (route registration, routes, topics), :mod:`.users` (users and access rules),
:mod:`.static_topics`, :mod:`.rebalance` (traffic and re-balance plans) and :mod:`.membership`
(the controllers' Raft group); :mod:`.base` holds what they share.
"""
