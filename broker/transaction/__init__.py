"""Transactional messages on the broker (docs/transactions.md)."""
