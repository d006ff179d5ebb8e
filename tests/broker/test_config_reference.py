"""docs/config-reference.md is generated from the code and must not drift from it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from broker.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_config_reference_matches_the_code() -> None:
    result = CliRunner().invoke(main, ["--print-config-reference"])
    assert result.exit_code == 0
    doc = (ROOT / "docs" / "config-reference.md").read_text()
    assert result.output.strip() in doc, "regenerate docs/config-reference.md (see its header)"
