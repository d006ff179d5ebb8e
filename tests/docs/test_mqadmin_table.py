"""The rmqctl-against-mqadmin tables in docs/operations.md and the README stay true to rmqctl:
every command they name as rmqctl's exists, every rmqctl command is named in both, and nothing
listed as not built is an rmqctl command."""

from __future__ import annotations

import re
from pathlib import Path

from rmqctl.cli import all_commands

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = set(all_commands())


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each markdown table of text: its header cells and its rows' cells."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
            continue
        if len(block) > 2:
            tables.append((block[0], block[2:]))
        block = []
    return tables


def _column(table: tuple[list[str], list[list[str]]], name: str) -> set[str]:
    header, rows = table
    index = header.index(name)
    return {word for row in rows for word in re.findall(r"`([a-zA-Z]+)", row[index])}


def _operations_section() -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index("## rmqctl and mqadmin")
    return text[start : text.index("\n## ", start + 1)]


def test_the_operations_table_names_every_command_and_only_commands() -> None:
    same, ours, missing = _tables(_operations_section())
    named = _column(same, "rmqctl") | _column(ours, "rmqctl")
    # "same" stands for the mqadmin cell's names in the users-and-rules rows.
    named = (named - {"same"}) | {c for c in _column(same, "mqadmin") if c in COMMANDS}
    assert named <= COMMANDS, f"named as rmqctl commands but not: {sorted(named - COMMANDS)}"
    assert named >= COMMANDS, f"rmqctl commands the table leaves out: {sorted(COMMANDS - named)}"
    not_built = _column(missing, "mqadmin")
    assert not not_built & COMMANDS, f"listed as not built: {sorted(not_built & COMMANDS)}"


def test_the_readme_table_names_every_command() -> None:
    rows = {
        row[0]: row[1]
        for header, body in _tables((ROOT / "README.md").read_text())
        if header == ["", "Commands"]
        for row in body
    }
    built = " ".join(text for label, text in rows.items() if not label.startswith("not built"))
    named = {word for word in re.findall(r"[a-zA-Z]+", built) if word in COMMANDS}
    assert named >= COMMANDS, f"rmqctl commands the README leaves out: {sorted(COMMANDS - named)}"
    not_built = rows["not built (why: docs/operations.md)"]
    assert not {w for w in re.findall(r"[a-zA-Z]+", not_built)} & COMMANDS
