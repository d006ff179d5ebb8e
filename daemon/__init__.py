"""What every daemon shares: strict config loading, logging set-up, the metrics endpoint and
signal handling. Nothing here knows about brokers or controllers."""
