"""``python -m storage.raftlog.repair DIR --accept-loss``: an operator's explicit decision to
repair a controller's Raft storage that the controller refuses to open because the repair
would lose committed entries (docs/operations.md, "A controller refuses to start: damaged Raft
log"). Run it only on a stopped controller, only when no intact copy of the log exists (no
backup, no healthy majority to rejoin); the entries it reports lost are gone from this node.
"""

from __future__ import annotations

import argparse
import sys

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


if __name__ == "__main__":
    sys.exit(main())
