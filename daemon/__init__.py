"""What every daemon shares: strict config loading, logging set-up, the metrics endpoint,
signal handling and the pauses and ending of its background tasks. Nothing here knows about
brokers or controllers."""
