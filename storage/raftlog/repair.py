"""``python -m storage.raftlog.repair DIR --accept-loss``: an operator's explicit decision to
repair a controller's Raft storage that the controller refuses to open because the repair
would lose committed entries (docs/operations.md, "A controller refuses to start: damaged Raft
log"). Run it only on a stopped controller, only when no intact copy of the log exists (no
backup, no healthy majority to rejoin); the entries it reports lost are gone from this node.
A DIR that is not a controller's data directory (missing, or with neither ``hardstate`` nor
``log/``: a mistyped path, a broker's store) is refused with one line, and nothing is made.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .disk import CorruptStorage, DiskStorage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m storage.raftlog.repair",
        description="Cut a damaged Raft log at its first bad entry, accepting the loss.",
    )
    parser.add_argument("directory", help="the controller's data directory (--data-dir)")
    parser.add_argument(
        "--accept-loss",
        action="store_true",
        required=True,
        help="required: committed entries past the damage are dropped from this node",
    )
    args = parser.parse_args(argv)
    refusal = not_a_controller_directory(Path(args.directory))
    if refusal is not None:
        print(f"repair: {refusal}; nothing was changed", file=sys.stderr)
        return 1
    try:
        store = DiskStorage.open(args.directory, accept_loss=args.accept_loss)
    except (CorruptStorage, OSError) as exc:
        print(f"repair: {exc}", file=sys.stderr)
        return 1
    for line in store.report.truncated:
        print(f"repaired: {line}")
    print(
        f"log now holds entries {store.first_index()} to {store.last_index()}, "
        f"commit index {store.hard_state().commit}"
    )
    store.close()
    return 0


def not_a_controller_directory(directory: Path) -> str | None:
    """Why ``directory`` is not a controller's data directory, or None when it is one. Opening
    the storage would create it (as a controller's first start does), so a mistyped path would
    be answered with an empty log "repaired" and the damaged one left as it was."""
    if not directory.is_dir():
        return f"{directory}: no such directory"
    if not (directory / "hardstate").is_file() and not (directory / "log").is_dir():
        return f"{directory} is not a controller's data directory (no hardstate, no log/)"
    return None


if __name__ == "__main__":
    sys.exit(main())
