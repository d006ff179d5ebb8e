"""Sends: what SEND_MESSAGE, SEND_BATCH_MESSAGE and the gRPC front's SendMessage store."""
