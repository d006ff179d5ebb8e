"""Scheduled delivery in the broker: the timing wheel's driver (see docs/timer.md)."""
