"""Which build a daemon runs: the compiled hot modules or the pure-Python ones
(docs/compiled.md). Logged at start and exported as ``rmq_broker_build_info`` / ``rmq_controller_build_info``."""

from __future__ import annotations

import sys

from prometheus_client import CollectorRegistry, Gauge

from rmqbuild import hook


def compiled_modules() -> list[str]:
    """The hot modules this process runs compiled (loaded from the build): [] in the pure
    build."""
    names = hook.compiled_modules()
    # Only the ones that are loaded from an extension module count (a hot module is imported
    # on first use: the daemons have imported theirs by the time they log it).
    return [n for n in names if n not in sys.modules or _is_extension(n)]


def _is_extension(name: str) -> bool:
    path = getattr(sys.modules[name], "__file__", None) or ""
    return not path.endswith(".py")


def describe() -> dict[str, object]:
    """The fields of the start-up log line."""
    finder = hook.active()
    modules = compiled_modules()
    if modules:
        return {"build": "compiled", "compiled_modules": len(modules)}
    if hook.pure_requested():
        why = f"{hook.PURE_ENV} is set"
    elif finder is None:
        why = "no compiled build installed (no C compiler, or not built by make)"
    else:
        why = "the compiled build is stale"
    return {"build": "pure", "reason": why}


def export(registry: CollectorRegistry, daemon: str, labels: dict[str, str] | None = None) -> None:
    """``rmq_<daemon>_build_info{compiled="true"|"false"}`` 1, with the daemon's own
    ``labels``."""
    extra = labels or {}
    gauge = Gauge(
        f"rmq_{daemon}_build_info",
        "1; compiled says whether the hot modules run compiled (mypyc) or pure Python",
        [*extra, "compiled"],
        registry=registry,
    )
    gauge.labels(**extra, compiled="true" if compiled_modules() else "false").set(1)
