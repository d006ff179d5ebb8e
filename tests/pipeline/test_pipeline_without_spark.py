"""``rmq-pipeline`` where the spark extra is not installed (``make run`` installs no extras): the
installed console script, started as an operator starts it, answers one line naming what is
missing and ``make pipeline-deps``, with exit status 2 (a refused start) and no traceback.

The packages are made missing for real in the child: a ``sitecustomize`` on its PYTHONPATH puts a
finder first on ``sys.meta_path`` that raises ``ModuleNotFoundError`` for them, as Python does
where a package is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import ROOT

SCRIPT = Path(sys.executable).parent / "rmq-pipeline"

HIDE = """\
import importlib.abc
import sys

HIDDEN = {hidden!r}


class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Missing())
"""


def run_without(
    hidden: tuple[str, ...], args: list[str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(HIDE.format(hidden=hidden))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def line_for(missing: str) -> str:
    return (
        f"rmq-pipeline: {missing} is not installed: the pipeline needs the spark extra; run "
        "`make pipeline-deps` (or `.venv/bin/pip install -e '.[spark]'`)\n"
    )


@pytest.mark.parametrize("missing", ["numpy", "pyarrow", "pyspark"])
@pytest.mark.parametrize(
    "job",
    [
        ["traffic", "-a", "127.0.0.1:1", "-t", "TopicTest"],
        ["archive", "-a", "127.0.0.1:1", "-t", "TopicTest", "--output", "o", "--checkpoint", "c"],
    ],
    ids=["traffic", "archive"],
)
def test_a_job_without_the_spark_extra_says_how_to_install_it(
    tmp_path: Path, missing: str, job: list[str]
) -> None:
    assert SCRIPT.exists(), f"{SCRIPT}: the project is not installed in this interpreter's venv"
    done = run_without((missing,), job, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line_for(missing))


def test_without_any_of_the_extra_the_line_names_the_first_missing(tmp_path: Path) -> None:
    done = run_without(
        ("numpy", "pyarrow", "pyspark"), ["traffic", "-a", "127.0.0.1:1", "-t", "T"], tmp_path
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line_for("numpy"))


def test_help_needs_no_spark_extra(tmp_path: Path) -> None:
    done = run_without(("numpy", "pyarrow", "pyspark"), ["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: rmq-pipeline"), done.stdout
    assert done.stderr == ""
