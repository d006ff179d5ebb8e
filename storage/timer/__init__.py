"""Scheduled delivery: the timer log and the timing wheel over it (pure code, time is an input)."""
