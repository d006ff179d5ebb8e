"""mqadmin's habits in rmqctl (issue 28 item 7): ``-n`` is ``-a``; shell completion scripts for
bash and zsh; a spinner on stderr saying what a long wait waits for, drawn only on a terminal
(a pty here), never into a pipe."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from client.producer import Producer
from rmqctl.common import Spinner, draws_progress
from tests.rmqctl.test_rmqctl_broker_process import ok_json
from tests.support.procs import ROOT, BrokerProc, rmqctl


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("_RMQCTL")}
    env.pop("RMQCTL_ADDRESSES", None)
    return {**env, **extra}


def test_completion_scripts_for_bash_and_zsh_are_produced() -> None:
    bash = rmqctl(env=_env(_RMQCTL_COMPLETE="bash_source"))
    assert bash.returncode == 0, bash.stderr
    assert "_rmqctl_completion()" in bash.stdout
    assert "complete -o nosort -F _rmqctl_completion rmqctl" in bash.stdout
    zsh = rmqctl(env=_env(_RMQCTL_COMPLETE="zsh_source"))
    assert zsh.returncode == 0, zsh.stderr
    assert zsh.stdout.startswith("#compdef rmqctl")
    # What the bash script asks: the commands (and flags) that complete a word.
    words = rmqctl(
        env=_env(_RMQCTL_COMPLETE="bash_complete", COMP_WORDS="rmqctl queryMsgBy", COMP_CWORD="1")
    )
    assert words.returncode == 0, words.stderr
    assert {"plain,queryMsgById", "plain,queryMsgByKey", "plain,queryMsgByTime"} <= set(
        words.stdout.split()
    )
    flags = rmqctl(
        env=_env(
            _RMQCTL_COMPLETE="bash_complete",
            COMP_WORDS="rmqctl queryMsgByTime --",
            COMP_CWORD="2",
        )
    )
    assert "plain,--topic" in flags.stdout.split() and "plain,--max" in flags.stdout.split()


def test_draws_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not draws_progress(io.StringIO())
    main, secondary = pty.openpty()
    with os.fdopen(secondary, "w") as tty:
        monkeypatch.setenv("TERM", "xterm")
        assert draws_progress(tty)
        monkeypatch.setenv("TERM", "dumb")
        assert not draws_progress(tty)
    os.close(main)
    closed = io.StringIO()
    closed.close()
    assert not draws_progress(closed)


def test_a_spinner_off_a_terminal_writes_nothing() -> None:
    out = io.StringIO()

    async def work() -> None:
        async with Spinner("waiting for nothing", out) as spinner:
            await asyncio.sleep(3 * Spinner.INTERVAL)
            spinner.clear()

    asyncio.run(work())
    assert out.getvalue() == ""


@pytest.mark.multiprocess
def test_n_is_an_alias_of_a(broker: BrokerProc) -> None:
    a = broker.address
    by_a = ok_json("clusterList", "-a", a)
    assert ok_json("clusterList", "-n", a) == by_a
    global_n = rmqctl("-n", a, "--json", "clusterList", env=_env())
    assert global_n.returncode == 0, global_n.stderr
    assert global_n.stdout.strip() and "broker-a" in global_n.stdout


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    """What the pty gave until ``needle`` appeared (AssertionError past ``timeout``)."""
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"{needle!r} not seen on the terminal; it showed {got[-400:]!r}"
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            try:
                got += os.read(fd, 4096)
            except OSError:  # the other end closed
                break
    return got


@pytest.mark.multiprocess
def test_consume_message_without_timeout_says_what_it_waits_for_on_a_terminal_only(
    broker: BrokerProc,
) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "2")
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rmqctl",
            "--json",
            "consumeMessage",
            "-a",
            a,
            "-t",
            "T",
            "-g",
            "g1",
        ],
        stdout=subprocess.PIPE,
        stderr=secondary,
        cwd=ROOT,
        env=_env(TERM="xterm"),
    )
    os.close(secondary)
    try:
        shown = _read_until(main, b"waiting for messages of T as group g1 (Ctrl-C to stop)", 60)
        assert b"\r" in shown  # redrawn in place, not line after line

        async def send() -> None:
            async with Producer(a) as producer:
                await producer.send("T", b"hello")

        asyncio.run(send())
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert b'"body": "hello"' in line
        _read_until(main, b"(1 received; Ctrl-C to stop)", 30)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
    # Into a pipe: no spinner, stderr stays empty for scripts.
    piped = rmqctl("--json", "consumeMessage", "-a", a, "-t", "T", "-g", "g2", "--count", "1")
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr


def test_the_completion_doc_is_true() -> None:
    """docs/operations.md names the lines that enable completion; they are the ones tested
    above."""
    text = (ROOT / "docs" / "operations.md").read_text()
    assert 'eval "$(_RMQCTL_COMPLETE=bash_source rmqctl)"' in text
    assert 'eval "$(_RMQCTL_COMPLETE=zsh_source rmqctl)"' in text
