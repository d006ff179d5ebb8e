"""``make bench``: run every benchmark (``bench/*_bench.py``) in turn and print its figures.

``make bench ONLY=broker`` runs the benchmarks whose file name contains ``broker``. Arguments are
passed to every benchmark: ``python bench/run.py --smoke`` runs each in its tiny mode
(bench/smoke.py), as ``make test`` does (tests/bench/test_benches_run.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benches() -> list[str]:
    only = os.environ.get("ONLY", "")
    return sorted(p.name for p in HERE.glob("*_bench.py") if only in p.name)


def main() -> int:
    status = 0
    for name in benches():
        print(f"== {name}", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / name), *sys.argv[1:]])
    return status


if __name__ == "__main__":
    sys.exit(main())
