"""``--dist loadgroup`` that keeps its groups under pytest 9.2.

pytest-xdist's loadgroup sends the tests of one ``xdist_group`` to one worker by renaming each
grouped test on the workers (``<nodeid>@<group>``, read back by the controller's scheduler).
pytest 9.2 builds node ids from a structured id that the rename no longer reaches, so the groups
are silently lost and, say, the tests of ``make run``'s fixed ports run side by side
(pytest-xdist issue 1386). This plugin hands the groups over itself: each worker writes the
groups of its collected tests to a file in a directory the controller names in the workers'
input, and the controller's scheduler (loadgroup's, with that table) reads them before it
schedules; a test renamed the old way is still grouped by its suffix.

Registered by tests/conftest.py when pytest-xdist is installed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

KEY = "rmq_xdist_groups"
"""The workers' input key naming the directory of the group files."""


def group_of(item: pytest.Item) -> str | None:
    """The item's xdist group as loadgroup names it (several marks: their names joined)."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "_".join(sorted(names)) if names else None


def write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker under loadgroup: write ``{nodeid: group}`` of the grouped ``items``."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or KEY not in workerinput:
        return
    groups = {item.nodeid: g for item in items if (g := group_of(item)) is not None}
    path = Path(workerinput[KEY]) / f"{workerinput['workerid']}.json"
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(groups))
    partial.replace(path)  # whole or absent for the controller


class GroupTableScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist: untyped
    """loadgroup's scheduler, the groups read from the workers' files (module doc)."""

    def __init__(self, config: pytest.Config, log: Any, directory: Path) -> None:
        super().__init__(config, log)
        self._directory = directory
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        scope = str(super()._split_scope(nodeid))
        if scope != nodeid:  # renamed the old way
            return scope
        if self._groups is None:  # first called once every worker has sent its collection
            self._groups = {}
            for path in sorted(self._directory.glob("*.json")):
                self._groups.update(json.loads(path.read_text()))
        return self._groups.get(nodeid, nodeid)


class XdistGroups:
    """The controller's side: a directory for the workers' files, and the scheduler."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="rmq-xdist-groups-"))

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[KEY] = str(self.directory)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup":
            return None
        return GroupTableScheduling(config, log, self.directory)

    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
