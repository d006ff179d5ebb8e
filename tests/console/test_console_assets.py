"""The console's vendored JavaScript is the version its lockfile names (no CDN: the pages load
console/static/htmx.min.js), and every page's script is served from there."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "console" / "static"
TEMPLATES = ROOT / "console" / "templates"


def test_vendored_htmx_is_the_lockfiles_version() -> None:
    lock = json.loads((STATIC / "package-lock.json").read_text())
    wanted = json.loads((STATIC / "package.json").read_text())["dependencies"]["htmx.org"]
    locked = lock["packages"]["node_modules/htmx.org"]["version"]
    assert locked == wanted
    vendored = re.search(r'version:"([0-9.]+)"', (STATIC / "htmx.min.js").read_text())
    assert vendored is not None, "htmx.min.js names no version"
    assert vendored.group(1) == locked


def test_pages_load_scripts_only_from_the_console() -> None:
    for page in TEMPLATES.glob("*.html"):
        for src in re.findall(r'<script[^>]*src="([^"]+)"', page.read_text()):
            assert src.startswith("/static/"), f"{page.name} loads {src}"
        assert "cdn" not in page.read_text().lower(), page.name
