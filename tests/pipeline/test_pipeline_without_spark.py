"""``rmq-pipeline`` where the spark extra is not installed (``make run`` installs no extras): one
line saying how to install it, exit status 1, no traceback."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from pipeline.cli import cli


@pytest.mark.parametrize("missing", ["pyspark", "pyarrow"])
def test_a_job_without_the_spark_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    # None in sys.modules makes the import fail as it does where the package is not installed.
    monkeypatch.setitem(sys.modules, missing, None)
    for name in [m for m in sys.modules if m.startswith(f"{missing}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    done = CliRunner().invoke(cli, ["traffic", "-a", "127.0.0.1:1", "-t", "TopicTest"])
    assert done.exit_code == 1
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert done.output == (
        f"rmq-pipeline: {missing} is not installed: the pipeline needs the spark extra; run "
        "`make pipeline-deps` (or `.venv/bin/pip install -e '.[spark]'`)\n"
    )
