"""rmq-console: the operators' web console (docs/console.md)."""
