"""Message traces written by the broker (``trace_enabled``): what it sees of each message, as
records of :mod:`protocol.trace` in the trace topic. :mod:`broker.trace.writer` buffers and
writes them; :mod:`broker.trace.observer` turns the broker's events into records."""
