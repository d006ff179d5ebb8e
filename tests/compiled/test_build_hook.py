"""The build's import hook (rmqbuild.hook): RMQ_PURE_PYTHON=1 imports the ``.py`` files, the
compiled build the extension modules, and a compiled module older than its source is never run
(its import fails saying what to do)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from daemon import build_info
from rmqbuild import hook
from rmqbuild.modules import COMPILED
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != hook.PURE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_pure_mode_imports_every_hot_module_from_its_source() -> None:
    code = (
        "import importlib, json; from daemon import build_info; "
        f"print(json.dumps([importlib.import_module(m).__file__ for m in {list(COMPILED)!r}]));"
        "print(json.dumps(build_info.describe()))"
    )
    files, info = python(code, RMQ_PURE_PYTHON="1").splitlines()
    assert [Path(f).relative_to(ROOT).as_posix() for f in json.loads(files)] == [
        m.replace(".", "/") + ".py" for m in COMPILED
    ]
    assert json.loads(info) == {"build": "pure", "reason": "RMQ_PURE_PYTHON is set"}


@pytest.mark.skipif(hook.active() is None, reason="no compiled build in this venv")
def test_the_compiled_build_imports_every_hot_module_from_the_build() -> None:
    finder = hook.active()
    assert finder is not None
    code = (
        "import importlib, json; "
        f"print(json.dumps([importlib.import_module(m).__file__ for m in {list(COMPILED)!r}]))"
    )
    for f in json.loads(python(code)):
        assert Path(f).is_relative_to(finder.build_dir), f
        assert not f.endswith(".py")
    registry = CollectorRegistry()
    build_info.export(registry, "broker")
    assert registry.get_sample_value("rmq_broker_build_info", {"compiled": "true"}) == 1.0


def copy_of_build(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    finder = hook.active()
    if finder is None:
        pytest.skip("no compiled build in this venv")
    build = tmp_path / "build"
    shutil.copytree(finder.build_dir / "lib", build / "lib")
    manifest = json.loads((finder.build_dir / hook.MANIFEST).read_text())
    return build, manifest


def test_a_changed_source_is_stale_and_a_touched_one_is_not(tmp_path: Path) -> None:
    src = tmp_path / "protocol" / "m.py"
    src.parent.mkdir()
    src.write_text("X = 1\n")
    st = src.stat()
    manifest = {
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "root": str(tmp_path),
        "modules": {
            "protocol.m": {
                "source": "protocol/m.py",
                "mtime_ns": st.st_mtime_ns,
                "size": st.st_size,
                "sha256": hook.source_digest(src),
            }
        },
        "extensions": {},
    }
    assert hook.stale_sources(manifest) == []
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a checkout: same bytes
    assert hook.stale_sources(manifest) == []
    src.write_text("X = 2\n")
    assert hook.stale_sources(manifest) == ["protocol/m.py"]
    src.unlink()
    assert hook.stale_sources(manifest) == ["protocol/m.py"]
    manifest["ext_suffix"] = ".cpython-399-x.so"
    assert "not this interpreter" in hook.stale_sources(manifest)[0]


def test_a_stale_build_fails_every_hot_import_loudly(tmp_path: Path) -> None:
    build, manifest = copy_of_build(tmp_path)
    modules = manifest["modules"]
    assert isinstance(modules, dict)
    modules["protocol.message"]["sha256"] = "0" * 64  # compiled from other bytes
    modules["protocol.message"]["mtime_ns"] = 0
    (build / hook.MANIFEST).write_text(json.dumps(manifest))
    # Pure at start (the venv's own build stays out), then this copy's hook installed.
    code = (
        "import os; del os.environ['RMQ_PURE_PYTHON']; import rmqbuild.hook as h; "
        f"h.install({str(build)!r})\n"
        "try:\n    import protocol.remoting\nexcept ImportError as e:\n    print(e)\n"
        "else:\n    print('imported', protocol.remoting.__file__)"
    )
    said = python(code, RMQ_PURE_PYTHON="1")
    assert said.startswith("protocol.remoting is compiled in "), said
    assert "protocol/message.py changed since" in said
    assert "run `make compiled` to rebuild, or set RMQ_PURE_PYTHON=1" in said


def test_the_finder_answers_only_for_the_compiled_modules(tmp_path: Path) -> None:
    build, manifest = copy_of_build(tmp_path)
    finder = hook.CompiledFinder(build, manifest, [])
    assert finder.find_spec("protocol.codes") is None
    spec = finder.find_spec("protocol.message")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).is_relative_to(build)


def test_a_started_broker_logs_which_build_it_runs(tmp_path: Path) -> None:
    """The build line comes once the daemon has started (daemon.cli.serve_until_stopped), not
    before its start-up checks: a broker that refuses to start prints its one line and nothing
    else, as tests/broker/test_corrupt_files.py checks (it failed with the build line logged
    before the refusal: 'assert 2 == 1')."""
    broker = BrokerProc(tmp_path)
    try:
        broker.start_and_wait()
        wait_until(lambda: '"event": "build"' in broker.log(), "the broker's build line", 30)
    finally:
        broker.stop()
    line = next(x for x in broker.log().splitlines() if '"event": "build"' in x)
    expected = "compiled" if build_info.compiled_modules() else "pure"
    assert json.loads(line)["build"] == expected, line
