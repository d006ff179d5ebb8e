"""rmqctl run inside the test process (click's CliRunner), for the multi-process tests that
drive a cluster through the CLI: the same commands, exit codes and output as ``python -m rmqctl``
(tests/support/procs.py ``rmqctl``), without a Python start each."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
from typing import Any

import structlog
from click.testing import CliRunner

import remoting.client as client_mod
from rmqctl.cli import cli


def rmqctl(*args: str) -> tuple[int, str, str]:
    """``rmqctl *args`` in this process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def rmqctl_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`rmqctl` where tests/support/procs.py's ``rmqctl`` (``python -m rmqctl`` as a
    process) was used: its CompletedProcess, ``env`` the environment the command sees (os.environ
    meanwhile). On a thread of its own, so a test's running event loop is no obstacle (the loop
    waits for it, as it waited for the process)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        code, out, err = pool.submit(_invoke, list(args), env).result()
    return subprocess.CompletedProcess(["rmqctl", *args], code, out, err)


def _invoke(args: list[str], env: dict[str, str] | None) -> tuple[int, str, str]:
    """One command, leaving this process as a process of its own would have: the remoting
    client's process-wide credentials, TLS and TLS advice, and structlog's configuration, which
    rmqctl sets for itself, are put back after it."""
    saved = (client_mod._process_credentials, client_mod._process_tls, client_mod._tls_advice)
    logging = structlog.get_config()
    try:
        result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    finally:
        client_mod._process_credentials, client_mod._process_tls, client_mod._tls_advice = saved
        structlog.configure(**logging)
    return result.exit_code, result.stdout, result.stderr


def ok_json(*args: str, env: dict[str, str] | None = None) -> Any:
    """:func:`rmqctl_run` of ``--json *args``, which must succeed: its JSON answer."""
    done = rmqctl_run("--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rmqctl_json(addresses: str, command: str, *args: str) -> Any:
    """``rmqctl --json <command> -a <addresses> *args``, which must succeed: its JSON answer."""
    code, out, err = rmqctl("--json", command, "-a", addresses, *args)
    assert code == 0, err
    return json.loads(out)


def has_master(addresses: str, group: str) -> bool:
    """Whether the controllers at ``addresses`` name a master of ``group`` (getSyncStateSet)."""
    code, out, _ = rmqctl("--json", "getSyncStateSet", "-a", addresses, "-b", group)
    return code == 0 and json.loads(out).get("masterBrokerId") is not None
