"""Message property names and the system topic of scheduled delivery (issue 11).

RocketMQ's names are used where RocketMQ has one, so a message a RocketMQ user already
recognises means the same here; the two of our own are marked.

A producer asks for a delivery time with one of:

* ``TIMER_DELIVER_MS``: absolute epoch milliseconds (RocketMQ 5's arbitrary-delay property);
* ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC``: a delay from the time the broker stores it;
* ``__STARTDELIVERTIME``: absolute epoch milliseconds (the name older Alibaba Cloud clients
  send; accepted for them).

The broker stores such a message under :data:`TIMER_TOPIC` (one queue) with its real topic and
queue in ``REAL_TOPIC`` / ``REAL_QID`` and the due time its timing wheel gave it in
``TIMER_OUT_MS``. At that time it appends the real message to its real topic, keeping
``UNIQ_KEY`` (the message id) and ``TIMER_OUT_MS`` and adding :data:`PROP_TIMER_SOURCE_OFFSET`,
so a replica replaying the CommitLog knows which scheduled entry was delivered. A recall is a
message carrying ``TIMER_DEL_UNIQKEY``.
"""

from __future__ import annotations

from typing import Final

TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
"""System topic scheduled messages wait under (RocketMQ's name); one queue, id 0."""

PROP_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROP_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
PROP_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROP_START_DELIVER_TIME: Final = "__STARTDELIVERTIME"
PROP_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
"""The due time the master's wheel gave the message; every replica schedules this value."""
PROP_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROP_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
PROP_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
PROP_REAL_TOPIC: Final = "REAL_TOPIC"
PROP_REAL_QUEUE_ID: Final = "REAL_QID"
PROP_UNIQ_KEY: Final = "UNIQ_KEY"

PROP_TIMER_SOURCE_OFFSET: Final = "TIMER_SOURCE_OFFSET"
"""Ours: on a delivered message, the CommitLog offset of the scheduled record it came from.
With ``TIMER_OUT_MS`` it is the wheel's progress key ``(due ms, offset)``."""

REQUEST_PROPERTIES: Final = (
    PROP_TIMER_DELIVER_MS,
    PROP_START_DELIVER_TIME,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
)
"""The properties that ask for scheduled delivery, in the order the broker honours them."""
