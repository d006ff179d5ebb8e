"""``python -m rmqctl``."""

from rmqctl.cli import main

main()
