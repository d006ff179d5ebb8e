"""POP consumption on the broker (docs/pop.md)."""
