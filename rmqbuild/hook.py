"""Loads the compiled hot modules (rmqbuild.modules) from the build directory, or none of them.

``make`` builds them into ``.venv/compiled`` (rmqbuild.build), never beside the ``.py`` files,
and writes a ``.pth`` file into the venv that calls :func:`install` at every start of its
interpreter. :func:`install` puts a finder first on ``sys.meta_path`` that answers only for the
compiled modules' names. Nothing is installed with ``RMQ_PURE_PYTHON=1`` (the ``.py`` files are
imported, as on a machine without a C compiler).

A compiled module whose ``.py`` changed since the build would run old code: then every compiled
module's import fails with one ImportError saying so (the group calls itself natively, so it is
loaded all compiled or all pure, never mixed). ``make`` rebuilds what changed before it runs
anything.

Standard library only: this runs before anything else in the venv's interpreter.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
from pathlib import Path
from types import ModuleType
from typing import Any

PURE_ENV = "RMQ_PURE_PYTHON"
MANIFEST = "manifest.json"


def pure_requested() -> bool:
    """RMQ_PURE_PYTHON is set to anything but "" or "0"."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_sources(manifest: dict[str, Any]) -> list[str]:
    """The compiled modules' sources that differ from what was compiled (or are gone), and the
    reason when the build is for another interpreter."""
    if manifest.get("ext_suffix") != sysconfig.get_config_var("EXT_SUFFIX"):
        return [f"the build is for {manifest.get('ext_suffix')}, not this interpreter"]
    root = Path(manifest["root"])
    stale = []
    for entry in manifest["modules"].values():
        src = root / entry["source"]
        try:
            st = src.stat()
        except OSError:
            stale.append(entry["source"])
            continue
        # Same size and mtime: unchanged. Otherwise the content decides (a checkout or a touch
        # changes the mtime only).
        if (st.st_mtime_ns, st.st_size) == (entry["mtime_ns"], entry["size"]):
            continue
        if source_digest(src) != entry["sha256"]:
            stale.append(entry["source"])
    return stale


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and the group's shared library) in ``build_dir``."""

    def __init__(self, build_dir: Path, manifest: dict[str, Any], stale: list[str]) -> None:
        self.build_dir = build_dir
        self.manifest = manifest
        self.stale = stale
        self.extensions: dict[str, str] = dict(manifest["extensions"])

    @property
    def modules(self) -> list[str]:
        return sorted(self.manifest["modules"])

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        rel = self.extensions.get(fullname)
        if rel is None:
            return None
        if self.stale:
            raise ImportError(
                f"{fullname} is compiled in {self.build_dir} from an older source "
                f"({', '.join(self.stale)} changed since): run `make compiled` to rebuild, "
                f"or set {PURE_ENV}=1 to run the pure-Python modules",
                name=fullname,
            )
        so = str(self.build_dir / rel)
        loader = importlib.machinery.ExtensionFileLoader(fullname, so)
        return importlib.util.spec_from_file_location(fullname, so, loader=loader)


_finder: CompiledFinder | None = None


def install(build_dir: str) -> None:
    """Put the compiled modules of ``build_dir`` first on the import path, unless
    RMQ_PURE_PYTHON is set or there is no build there (the .pth file calls this)."""
    global _finder
    if pure_requested() or _finder is not None:
        return
    where = Path(build_dir)
    try:
        manifest = json.loads((where / MANIFEST).read_text())
    except (OSError, ValueError):
        return  # no build (a machine without a C compiler): the .py files
    _finder = CompiledFinder(where, manifest, stale_sources(manifest))
    sys.meta_path.insert(0, _finder)


def active() -> CompiledFinder | None:
    """The installed finder (compiled build), None in the pure build."""
    return _finder


def compiled_modules() -> list[str]:
    """The modules this interpreter runs compiled ([] in the pure build)."""
    return [] if _finder is None or _finder.stale else _finder.modules


def load_pure(module: str, root: Path | None = None) -> ModuleType:
    """``module``'s ``.py`` imported under the name ``_pure.<module>``, beside the compiled one
    (what the property tests compare it with). Its own imports are the usual ones."""
    base = root or Path(__file__).resolve().parent.parent
    name = f"_pure.{module}"
    if name in sys.modules:
        return sys.modules[name]
    path = base / (module.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod
