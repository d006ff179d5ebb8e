"""Compiles the hot modules (rmqbuild.modules) with mypyc into ``<venv>/compiled`` and installs
the import hook's ``.pth`` into the venv: ``python -m rmqbuild.build`` (``make compiled``; every
make target that runs the project depends on it).

- Nothing changed since the last build (same sources, module list, mypyc and interpreter): says
  so and returns at once.
- No C compiler, no Python headers or no mypyc: removes any old build and says the pure-Python
  modules run; exit 0 (the fallback, not an error).
- RMQ_PURE_PYTHON=1: builds nothing (and the hook loads nothing while it is set).
- mypyc or the C compiler fails: exit 1 with its output (a defect to fix, not a fallback).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from rmqbuild.hook import MANIFEST, pure_requested, source_digest, stale_sources
from rmqbuild.modules import COMPILED, GROUP, source_path

ROOT = Path(__file__).resolve().parent.parent
PTH = "rmq_compiled.pth"


def missing_toolchain() -> str | None:
    """What the build lacks (a C compiler, Python.h, mypyc), or None."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        return f"no Python headers ({include}/Python.h; Debian: python3-dev)"
    try:
        import mypyc  # noqa: F401
    except ImportError:
        return "no mypyc (pip install mypy)"
    return None


def compiler_version() -> str:
    from mypy.version import __version__

    return f"mypyc {__version__}"


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH


def read_manifest(build_dir: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads((build_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc


def up_to_date(build_dir: Path) -> bool:
    manifest = read_manifest(build_dir)
    return (
        manifest is not None
        and manifest.get("compiler") == compiler_version()
        and manifest.get("root") == str(ROOT)
        and sorted(manifest["modules"]) == sorted(COMPILED)
        and not stale_sources(manifest)
    )


def remove_build(build_dir: Path) -> None:
    pth_path().unlink(missing_ok=True)
    shutil.rmtree(build_dir, ignore_errors=True)


def compile_jobs() -> int:
    """How many C files gcc compiles at once: the CPUs this process may run on."""
    return max(1, len(os.sched_getaffinity(0)))


def parallel_build_ext() -> type[Any]:
    """setuptools' build_ext, with each extension's C files compiled ``compile_jobs()`` at a
    time (build_ext's own ``--parallel`` runs whole extensions at once, and the group's shared
    library is one extension of many files)."""
    from concurrent.futures import ThreadPoolExecutor

    from setuptools.command.build_ext import build_ext

    class ParallelBuildExt(build_ext):  # type: ignore[misc]
        def build_extensions(self) -> None:
            serial = self.compiler.compile

            def compile_each(sources: list[str], *args: Any, **kwargs: Any) -> list[str]:
                with ThreadPoolExecutor(compile_jobs()) as pool:
                    done = pool.map(lambda src: serial([src], *args, **kwargs), sources)
                    return [obj for objects in done for obj in objects]

            self.compiler.compile = compile_each
            super().build_extensions()

    return ParallelBuildExt


def compile_modules(build_dir: Path) -> dict[str, Any]:
    """Runs mypyc and the C compiler; returns the manifest of what it built."""
    from mypyc.build import mypycify
    from setuptools import setup

    sources = {m: ROOT / source_path(m) for m in COMPILED}
    # What is compiled is what these digests describe: taken before mypyc reads the files.
    entries = {}
    for module, src in sources.items():
        st = src.stat()
        entries[module] = {
            "source": source_path(module),
            "mtime_ns": st.st_mtime_ns,
            "size": st.st_size,
            "sha256": source_digest(src),
        }
    lib = build_dir / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    extensions = mypycify(
        # pyproject's [tool.mypy] applies (strict); its overrides for modules outside the
        # build would otherwise count as unused config.
        ["--no-warn-unused-configs", *(source_path(m) for m in COMPILED)],
        opt_level="3",
        group_name=GROUP,
        target_dir=str(build_dir / "c"),
        # A C file per module (and per runtime file), compiled in parallel (ParallelBuildExt):
        # one file of the whole group took gcc -O3 about 100 s on one core, these about 33 s
        # on two.
        multi_file=True,
    )
    setup(
        name="rmq-compiled",
        ext_modules=extensions,
        cmdclass={"build_ext": parallel_build_ext()},
        script_args=[
            "--quiet",
            "build_ext",
            "--build-lib",
            str(lib),
            "--build-temp",
            str(build_dir / "tmp"),
        ],
    )
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = {}
    for ext in extensions:
        rel = ext.name.replace(".", "/") + suffix
        if not (lib / rel).exists():
            raise SystemExit(f"rmqbuild: mypyc built no {rel}")
        built[ext.name] = f"lib/{rel}"
    return {
        "compiler": compiler_version(),
        "ext_suffix": suffix,
        "root": str(ROOT),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "modules": entries,
        "extensions": built,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--build-dir",
        type=Path,
        default=Path(sys.prefix) / "compiled",
        help="where the extension modules go (default: <venv>/compiled)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    build_dir: Path = args.build_dir.resolve()
    if pure_requested():
        print("== RMQ_PURE_PYTHON is set: nothing compiled, the pure-Python modules run")
        return 0
    missing = missing_toolchain()
    if missing is not None:
        remove_build(build_dir)
        print(f"== {missing}: the pure-Python modules run (nothing compiled)")
        return 0
    if not args.force and up_to_date(build_dir):
        print(f"== compiled hot modules up to date ({len(COMPILED)} modules, {build_dir})")
    else:
        print(
            f"== compiling {len(COMPILED)} hot modules with {compiler_version()} into {build_dir}"
        )
        (build_dir / MANIFEST).unlink(missing_ok=True)
        os.chdir(ROOT)  # mypycify takes paths relative to the repository
        manifest = compile_modules(build_dir)
        tmp = build_dir / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
        tmp.replace(build_dir / MANIFEST)
    pth_path().write_text(f"import rmqbuild.hook; rmqbuild.hook.install({str(build_dir)!r})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
