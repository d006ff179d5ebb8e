"""The broker's requests and answers, typed: one module per family of request codes (the pull
family is :mod:`protocol.pull`). Each request is a frozen, slotted, keyword-only dataclass with
its request ``code``, ``encode()`` (its header and body) and the classmethod ``parse(header,
body)``, which checks every field and raises :class:`~protocol.fields.FieldError` (answered
BAD_REQUEST) for a bad one. Pure: no sockets, no clock.
"""
