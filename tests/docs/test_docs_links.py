"""README.md and docs/ stand on their own: every relative link resolves to a file of the
repository, none leaves it, the README's layout table names every package, and the commands the
README gives for ``make run`` are the ones the launcher prints."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose(page: Path) -> str:
    """The page without its fenced code blocks (commands there are not links)."""
    return FENCE.sub("", page.read_text())


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", prose(page), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    bad: list[str] = []
    for target in LINK.findall(prose(page)):
        if SCHEME.match(target):
            continue  # http(s), mailto: not a file of ours
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if path.startswith("/") or not resolved.is_relative_to(ROOT):
            bad.append(f"{target}: leaves the repository")
        elif not resolved.exists():
            bad.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            bad.append(f"{target}: no heading #{anchor}")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_repository(page: Path) -> None:
    text = page.read_text()
    for outside in ("../shared", "/work/", "DESIGN.md", "STYLE.md"):
        assert outside not in text, f"{page.relative_to(ROOT)} mentions {outside}"


def test_the_readme_layout_table_names_every_package_and_top_level_directory() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Layout") :]
    listed = set(re.findall(r"`([\w/]+)/`", table))
    packages = {
        str(init.parent.relative_to(ROOT))
        for init in ROOT.glob("**/__init__.py")
        if not init.relative_to(ROOT).parts[0].startswith((".", "tests"))
    }
    top = {"deploy", "tests", "bench", "docs"}
    missing = sorted((packages | top) - listed)
    assert not missing, f"README.md's layout table lacks {missing}"


def test_the_readme_gives_the_commands_make_run_prints() -> None:
    spec = importlib.util.spec_from_file_location(
        "local_cluster", ROOT / "deploy" / "local_cluster.py"
    )
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"In another terminal:\n\n```sh\n(.*?)```", readme, re.S)
    assert block is not None
    # make run prints the master's metrics port; the README shows broker-a@10911's, 9300.
    assert block.group(1).rstrip("\n") == launcher.hints(9300)
