"""The benches' tiny mode, one switch for all: ``--smoke``.

``python bench/<name>_bench.py --smoke`` runs the whole bench once with a few hundred messages,
short phases and no peers (NATS JetStream, PySyncObj, py-spy, which it skips): every phase runs
and prints its figures, but the figures mean nothing. It is how ``make test`` checks that each
bench still runs (tests/bench/test_benches_run.py); ``python bench/run.py --smoke`` runs them
all so. Flags given beside ``--smoke`` win over its tiny settings.

A bench declares its tiny settings, as flags of its own, with :func:`parse_args`.
"""

from __future__ import annotations

import argparse
from typing import Any

FLAG = "--smoke"


def parse_args(
    parser: argparse.ArgumentParser, argv: list[str] | None = None, **tiny: Any
) -> argparse.Namespace:
    """``parser.parse_args()`` with ``--smoke`` added; with it, ``tiny`` replaces the defaults
    (a flag given on the command line still wins)."""
    dests = {a.dest for a in parser._actions}
    unknown = sorted(set(tiny) - dests)
    if unknown:
        raise ValueError(f"tiny settings for no flag of this bench: {unknown}")
    shown = ", ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in tiny.items()
    )
    parser.add_argument(
        FLAG,
        action="store_true",
        help=f"a tiny run that only checks the bench still runs; figures mean nothing ({shown})",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**tiny)
        args = parser.parse_args(argv)
    return args
