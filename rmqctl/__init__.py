"""rmqctl package."""
