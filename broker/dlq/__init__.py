"""A consumer group's dead-letter queue, listed and re-sent (:mod:`broker.dlq.service`)."""
