"""Request processors: one module per family of requests, each with a ``register(server)``."""
