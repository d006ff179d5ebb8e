"""``make bench``: run every benchmark in turn and print its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["broker_bench.py"]


def main() -> int:
    status = 0
    for name in BENCHES:
        print(f"== {name}", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / name), *sys.argv[1:]])
    return status


if __name__ == "__main__":
    sys.exit(main())
