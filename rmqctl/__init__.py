"""The rmqctl command line (see :mod:`rmqctl.cli`)."""
