"""``make run`` and ``make demo`` as an operator runs them: the launcher on its fixed loopback
ports (README.md), with a temp data directory and small segments.

These use the embedded ports (9858-9878, 10911-10933, 9200-9202, 9300-9302), so they fail, with
the port named, if a developer's ``make run`` is up on this machine. Every daemon a launcher
started is ended by its PID (from the launcher's table) when a test ends, whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.metrics import scrape
from tests.support.procs import ROOT, port_open, small_segments_config
from tests.support.wait import stays, wait_until

# One group: the tests share the fixed ports, so they run one after another on one worker.
pytestmark = [pytest.mark.multiprocess, pytest.mark.xdist_group("fixed-ports")]

# rmqctl of this tree (the virtualenv's console script may belong to another checkout).
RMQCTL = [sys.executable, "-m", "rmqctl"]
ADDRESSES = "127.0.0.1:9878;127.0.0.1:9868;127.0.0.1:9858"
PORTS = [9878, 9868, 9858, 10911, 10912, 10921, 10922, 10931, 10932, 9200, 9201, 9202]
PORTS += [9300, 9301, 9302]
LAUNCHER = ROOT / "deploy" / "local_cluster.py"


@pytest.fixture
def free_embedded_ports() -> None:
    busy = [p for p in PORTS if port_open(p)]
    assert not busy, f"ports {busy} are in use (is `make run` up?); these tests need them"


def rmqctl(
    *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RMQCTL_ADDRESSES": ADDRESSES, **(env or {})}
    return subprocess.run(
        [*RMQCTL, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Launchers:
    """The launchers a test starts (``make run`` as ``deploy/local_cluster.py``), each with its
    log; at the end each is stopped with Ctrl-C, and every daemon any of them listed in its
    table (or that a test added to ``pids``) is killed by PID if still there."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.config = small_segments_config(tmp_path, "broker")
        self.procs: list[subprocess.Popen[str]] = []
        self.by_log: dict[str, subprocess.Popen[str]] = {}
        self.pids: set[int] = set()

    def argv(self, var: str = "var", *extra: str) -> list[str]:
        return [
            sys.executable, str(LAUNCHER),
            "--var", str(self.tmp_path / var), "--broker-config", str(self.config), *extra,
        ]  # fmt: skip

    def start(
        self, log_name: str = "launcher.log", *extra: str, var: str = "var"
    ) -> subprocess.Popen[str]:
        log = (self.tmp_path / log_name).open("w")
        proc = self.by_log[log_name] = subprocess.Popen(
            self.argv(var, *extra),
            cwd=ROOT,
            stdin=subprocess.PIPE,  # the console: a line "r" restarts the dead daemons
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def ready(self, log_name: str = "launcher.log", timeout: float = 90) -> list[list[str]]:
        """The launcher's table once printed; its daemons' PIDs join ``pids``."""
        log = self.tmp_path / log_name

        def text() -> str:
            return log.read_text() if log.exists() else ""

        def table() -> list[list[str]] | None:
            proc = self.by_log.get(log_name)  # None: a launcher the test started itself
            code = proc.poll() if proc is not None else None
            assert code is None, f"the launcher exited with status {code}:\n{text()[-4000:]}"
            return ready_table(text())

        rows = wait_until(
            table, "make run's table of processes", timeout,
            interval=0.3, on_timeout=lambda: text()[-4000:],
        )  # fmt: skip
        self.pids.update(int(r[1]) for r in rows[1:] if r[1].isdigit())  # "-": not running
        return rows

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launchers(tmp_path: Path, free_embedded_ports: None) -> Iterator[Launchers]:
    started = Launchers(tmp_path)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def launcher(launchers: Launchers) -> subprocess.Popen[str]:
    return launchers.start()


# What make run prints of its daemons: every line prefixed with one of these names.
PROCESSES = ["n0", "n1", "n2", "broker-a@10911", "broker-a@10921", "broker-a@10931"]
# ... and the web console's (rmq-console), which is not in the table of daemons.
LOGGING = [*PROCESSES, "console"]
DAEMON_LINE = re.compile(r"^(\S+)\s+\| ")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z \[")
WHOLE_LINE = re.compile(r"^(n\d|broker-a@\d+|console)\s+\| " + TIMESTAMP.pattern)
# A warning or worse, as the console renderer and the standard library's logging print them.
TROUBLE = re.compile(
    r"\[(warning|error|critical|exception)\s*\]|\b(WARNING|ERROR|CRITICAL)\b|Traceback"
)


def readme_hints() -> list[str]:
    """The commands README.md gives to try against make run's cluster."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"In another terminal:\n\n```sh\n(.*?)```", text, re.S)
    assert block, "README.md: no sh block after 'In another terminal:'"
    return block.group(1).splitlines()


def ready_table(out: str) -> list[list[str]] | None:
    """The table make run prints once a master is elected (None before)."""
    found = re.search(r"\nLocal cluster ready:\n\n(process .*?)\n\n", out, re.S)
    if found is None:
        return None
    lines = found.group(1).splitlines()
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def sync_state() -> dict[str, object] | None:
    done = rmqctl("--json", "getSyncStateSet", "-b", "broker-a")
    return json.loads(done.stdout) if done.returncode == 0 else None


def own_role(metrics_port: int) -> str | None:
    """A broker's role as it says itself on its metrics port (None: no answer)."""
    try:
        text = scrape(metrics_port)
    except OSError:
        return None
    found = re.search(r'^rmq_broker_role\{[^}]*role="(\w+)"\} 1\.0$', text, re.M)
    return found.group(1) if found else None


def full_sync_state_set() -> bool:
    done = rmqctl("--json", "getSyncStateSet", "-b", "broker-a")
    if done.returncode != 0:
        return False
    doc = json.loads(done.stdout)
    return bool(doc["masterAddress"]) and len(doc["syncStateSet"]) == 3


def test_make_run_serves_rmqctl_and_stops_cleanly_on_ctrl_c(
    launcher: subprocess.Popen[str], launchers: Launchers, tmp_path: Path
) -> None:
    """make run's console: the table once a master is elected, the README's commands, every
    daemon line prefixed with its process, and no warning from start to Ctrl-C."""
    log = tmp_path / "launcher.log"
    rows = launchers.ready()
    assert rows[0] == ["process", "pid", "address", "broker id", "role", "metrics port"]
    assert [r[0] for r in rows[1:]] == PROCESSES
    roles = [r[4] for r in rows[1:]]
    assert sorted(roles[:3]) == [
        "controller, follower",
        "controller, follower",
        "controller, leader",
    ]
    assert sorted(roles[3:]) == ["master", "slave", "slave"]
    assert sorted(r[3] for r in rows[4:]) == ["1", "2", "3"]  # the broker ids
    master_metrics = next(r[5] for r in rows[1:] if r[4] == "master")
    # The commands to try are the README's, but for the metrics port: the master's.
    printed = log.read_text().split("Try, in another terminal:\n\n", 1)[1].split("\n\n", 1)[0]
    readme = readme_hints()
    assert readme[-1].startswith("curl -s http://127.0.0.1:9300/metrics")
    readme[-1] = readme[-1].replace(":9300/", f":{master_metrics}/")
    assert [line.removeprefix("  ") for line in printed.splitlines()] == readme

    wait_until(full_sync_state_set, "a master with three replicas in sync", 60, interval=0.3)
    assert rmqctl("updateTopic", "-t", "TopicTest", "-q", "4").returncode == 0
    wait_until(
        lambda: rmqctl("topicRoute", "-t", "TopicTest").returncode == 0, "the topic route", 30
    )
    sent = rmqctl("--json", "sendMessage", "-t", "TopicTest", "-p", "hello", "--count", "10")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["sent"] == 10
    got = rmqctl(
        "--json", "consumeMessage", "-t", "TopicTest", "-g", "g", "--count", "10", "--timeout", "20"
    )
    assert got.returncode == 0, got.stderr
    bodies = [json.loads(line)["body"] for line in got.stdout.splitlines()]
    assert bodies == ["hello"] * 10

    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=40) == 0
    out = log.read_text()
    assert out.rstrip().endswith("local cluster stopped")
    # One line says the cluster is open (no authentication, no TLS) and how to close it.
    notice = [line for line in out.splitlines() if line.startswith("Security off:")]
    assert len(notice) == 1 and "make run SECURE=1" in notice[0], notice
    daemon_lines = [line for line in out.splitlines() if DAEMON_LINE.match(line)]
    names = {m.group(1) for line in daemon_lines if (m := DAEMON_LINE.match(line))}
    assert names == set(LOGGING)  # every daemon logged, each line named
    # Each line whole: the name, one timestamp at its start, no second record glued on.
    torn = [
        line
        for line in daemon_lines
        if not WHOLE_LINE.match(line) or len(TIMESTAMP.findall(line)) != 1
    ]
    assert not torn, "\n".join(torn)
    trouble = [line for line in out.splitlines() if TROUBLE.search(line)]
    assert not trouble, "\n".join(trouble)
    for i in range(3):
        # A clean stop removes the abort marker: the next start needs no recovery.
        assert not (tmp_path / "var" / f"broker-a-{i}" / "abort").exists()


def test_a_replica_that_refuses_to_start_does_not_hold_back_the_table(
    launchers: Launchers,
) -> None:
    """One replica's live config changes file is damaged: it refuses to start (status 2). The
    other two are a working group, so make run prints its table, with their PIDs, and the
    refusing replica's row says it exited. Before, no table came at all (it waited for every
    replica to be in sync): the operator had no PID of any daemon."""
    live = launchers.tmp_path / "var" / "broker-a-2" / "config" / "liveConfig.json"
    live.parent.mkdir(parents=True)
    live.write_text('{"max_pull_batch": 7}\n')  # edited by hand: no checksum
    launchers.start()
    rows = {r[0]: r for r in launchers.ready(timeout=60)[1:]}
    refused = rows.pop("broker-a@10931")
    assert refused[1] == "-" and refused[4].startswith("exited (status 2)"), refused
    assert all(r[1].isdigit() for r in rows.values()), rows
    roles = sorted(r[4] for name, r in rows.items() if name.startswith("broker-a@"))
    assert roles == ["master", "slave"], rows


def test_make_demo_fails_over_and_loses_nothing(tmp_path: Path, free_embedded_ports: None) -> None:
    config = small_segments_config(tmp_path, "broker")
    argv = [
        sys.executable, str(ROOT / "deploy" / "demo.py"),
        "--var", str(tmp_path / "demo"), "--broker-config", str(config),
    ]  # fmt: skip
    demo = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out, _ = demo.communicate(timeout=240)
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGTERM)  # the demo stops its daemons by PID, then exits
            try:
                demo.wait(timeout=40)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.wait()
    assert demo.returncode == 0, out[-4000:]
    assert "consumed 200 distinct messages of 200 acknowledged" in out
    assert "first acknowledged write after" in out


def test_a_daemon_killed_under_make_run_is_reported_and_restarted_on_request(
    launcher: subprocess.Popen[str], launchers: Launchers, tmp_path: Path
) -> None:
    """kill -9 of the master under make run: the launcher says so and keeps the others running,
    they elect a new master and serve, a second make run and make demo refuse to start on the
    ports in use (naming the port and its process), and "r" + Enter on the launcher's console
    brings the killed broker back, as a slave."""
    log = tmp_path / "launcher.log"
    rows = launchers.ready()
    by_name = {r[0]: r for r in rows[1:]}

    # A second launcher, and the demo, on the same ports: one line, exit status 2.
    second = subprocess.run(
        launchers.argv("var2"), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stdout == ""
    assert re.fullmatch(
        rf"local cluster: port 9878 \(controller n0\) is in use by PID {by_name['n0'][1]} "
        r"\(.*-m controller --id n0 .*\): is another `make run` or `make demo` up\? "
        r"Stop it first\n",
        second.stderr,
    ), second.stderr
    demo = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "demo.py"), "--var", str(tmp_path / "demo")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert demo.stderr.startswith("demo: port 9878 (controller n0) is in use by PID "), demo.stderr
    assert rmqctl("topicRoute", "-t", "DemoTopic").returncode != 0  # it touched nothing

    wait_until(full_sync_state_set, "a master with three replicas in sync", 60, interval=0.3)
    assert rmqctl("updateTopic", "-t", "TopicTest", "-q", "4").returncode == 0
    wait_until(
        lambda: rmqctl("topicRoute", "-t", "TopicTest").returncode == 0, "the topic route", 30
    )
    master = next(r for r in rows[1:] if r[4] == "master")
    os.kill(int(master[1]), signal.SIGKILL)

    wait_until(
        lambda: f"local cluster: {master[0]} exited with status -9 (SIGKILL); the others keep "
        "running. Type r and Enter to restart every dead daemon" in log.read_text(),
        "the launcher to report the death", 30,
    )  # fmt: skip
    new = wait_until(
        lambda: (d := sync_state()) and d["masterAddress"] not in ("", master[2]) and d,
        "a new master", 60, interval=0.3,
    )  # fmt: skip
    assert launcher.poll() is None, log.read_text()[-3000:]
    new_name = next(r[0] for r in rows[1:] if r[2] == new["masterAddress"])
    wait_until(
        lambda: f"local cluster: broker-a's master is {new_name} at epoch {new['masterEpoch']}"
        in log.read_text(),
        "the launcher to tell the new master", 30,
    )  # fmt: skip
    sent = wait_until(
        lambda: (d := rmqctl("--json", "sendMessage", "-t", "TopicTest", "-p", "after"))
        .returncode == 0 and d,
        "a send acknowledged by the new master", 30, interval=0.3,
    )  # fmt: skip
    assert json.loads(sent.stdout)["sent"] == 1
    for name in ("n0", "n1", "n2", *(r[0] for r in rows[4:] if r[0] != master[0])):
        assert alive(int(by_name[name][1])), f"{name} is gone"

    assert launcher.stdin is not None
    launcher.stdin.write("r\n")
    launcher.stdin.flush()
    restarted = wait_until(
        lambda: re.search(rf"local cluster: restarting {master[0]} \(PID (\d+)\)", log.read_text()),
        "the launcher to restart the killed broker", 30,
    )  # fmt: skip
    launchers.pids.add(int(restarted.group(1)))
    wait_until(full_sync_state_set, "the old master back in the SyncStateSet", 90, interval=0.3)
    assert sync_state()["masterAddress"] == new["masterAddress"]  # type: ignore[index]
    wait_until(
        lambda: own_role(int(master[5])) == "slave", "the old master to say it is a slave", 30
    )
    # Ctrl-C stops every daemon, the restarted one included.
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=40) == 0
    assert not [p for p in launchers.pids if alive(p)]


def daemon_pids(rows: list[list[str]]) -> list[int]:
    return [int(r[1]) for r in rows[1:]]


def children(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid``, from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def is_broker(pid: int) -> bool:
    try:
        return b"\0broker\0" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_the_daemons_die_with_a_killed_launcher_and_the_next_table_waits_for_the_brokers(
    launchers: Launchers, tmp_path: Path
) -> None:
    """kill -9 of make run ends its daemons (the kernel's parent-death signal). The next make
    run on that data prints its table only once every broker says of itself the role the table
    gives it: the controllers remember the master from before the crash and answer with it at
    once, while the brokers are still starting (here held stopped with SIGSTOP, as a broker
    with much to recover is held by its recovery)."""
    first = launchers.start()
    pids = daemon_pids(launchers.ready())
    wait_until(full_sync_state_set, "a master with three replicas in sync", 60, interval=0.3)
    first.kill()
    first.wait()
    wait_until(
        lambda: not [p for p in pids if alive(p)], "every daemon to die with the launcher", 20,
        on_timeout=lambda: f"still running: {[p for p in pids if alive(p)]}",
    )  # fmt: skip

    # The controllers keep naming the master while no broker heartbeats for as long as their
    # grace period lasts (one broker heartbeat timeout, 1 s by default): long enough here for
    # the check below to see it on a loaded host too.
    patient = tmp_path / "patient-controllers.toml"
    patient.write_text(
        "broker_heartbeat_timeout_ms = 60000\nbroker_heartbeat_timeout_max_ms = 60000\n"
    )
    second = launchers.start("second.log", "--controller-config", str(patient))
    log = tmp_path / "second.log"
    held: set[int] = set()
    try:

        def hold_brokers() -> bool:
            for pid in children(second.pid):
                if pid not in held and is_broker(pid):
                    os.kill(pid, signal.SIGSTOP)
                    held.add(pid)
                    launchers.pids.add(pid)
            return len(held) == 3

        wait_until(hold_brokers, "the three brokers to start", 60, interval=0.01)
        # What the controllers answer, with every broker still held: a master, all in sync.
        wait_until(full_sync_state_set, "the controllers to name the old master", 60)
        stays(
            lambda: ready_table(log.read_text()) is None,
            5,
            "no table while no broker has said anything",
            interval=0.2,
            on_failure=lambda: log.read_text()[-3000:],
        )
    finally:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    rows = launchers.ready("second.log")
    out = log.read_text().split("\nLocal cluster ready:", 1)[0]
    for name, _pid, _address, _bid, role, _metrics in rows[4:]:
        said = re.findall(rf"^{re.escape(name)}\s+\| .*\] becoming (master|slave) ", out, re.M)
        assert said and said[-1] == role, (
            f"the table shows {name} as {role}; before it, the broker said {said or 'nothing'}"
        )


def test_ctrl_c_on_make_run_piped_to_tee_stops_every_daemon(
    launchers: Launchers, tmp_path: Path
) -> None:
    """``make run 2>&1 | tee run.log``, then Ctrl-C: the terminal's SIGINT goes to the whole
    pipeline, tee dies with it and the launcher's stdout is a broken pipe; the launcher still
    stops every daemon, cleanly (no abort marker left)."""
    log = tmp_path / "launcher.log"
    command = " ".join(map(shlex.quote, launchers.argv())) + f" 2>&1 | tee {shlex.quote(str(log))}"
    shell = subprocess.Popen(
        ["bash", "-c", command],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        pids = daemon_pids(launchers.ready())
        os.killpg(shell.pid, signal.SIGINT)  # what Ctrl-C does
        shell.wait(timeout=60)
        wait_until(
            lambda: not [p for p in pids if alive(p)], "every daemon to stop", 30,
            on_timeout=lambda: f"still running: {[p for p in pids if alive(p)]}",
        )  # fmt: skip
        for i in range(3):
            assert not (tmp_path / "var" / f"broker-a-{i}" / "abort").exists(), (
                f"broker-a-{i} was not stopped cleanly"
            )
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()


def exported(env_file: Path) -> dict[str, str]:
    """The variables a shell ``source`` of ``env_file`` exports."""
    found = re.findall(r'^export (\w+)="([^"]*)"$', env_file.read_text(), re.M)
    return dict(found)


def tls_handshake(port: int, ca: Path, alpn: list[str] | None = None) -> str:
    """The TLS version a server on ``port`` speaks, its certificate checked against ``ca``."""
    context = ssl.create_default_context(cafile=str(ca))
    if alpn:
        context.set_alpn_protocols(alpn)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return str(tls.version())


def test_make_run_secure_has_tls_and_authentication_on_every_port(
    launchers: Launchers, tmp_path: Path
) -> None:
    """make run SECURE=1: TLS on every port, a super user whose credentials file (and the CA)
    var/secure/env hands to rmqctl, which then creates a topic, sends and consumes; rmqctl
    without the credentials, or without TLS, is refused."""
    launcher = launchers.start("launcher.log", "--secure")
    rows = launchers.ready()
    out = (tmp_path / "launcher.log").read_text()
    secure = tmp_path / "var" / "secure"
    assert [line for line in out.splitlines() if line.startswith("Security on:")] == [
        f"Security on: authentication and TLS (mutual inside the cluster) on every port but "
        f"the metrics ports; the super user's credentials in {secure / 'admin.toml'}, the CA "
        f"in {secure / 'tls' / 'ca.crt'}."
    ]
    assert f"  source {secure / 'env'}   # secure mode:" in out
    assert (secure / "admin.toml").stat().st_mode & 0o077 == 0
    env = exported(secure / "env")
    assert env == {
        "RMQCTL_ADDRESSES": ADDRESSES,
        "RMQ_CREDENTIALS_FILE": str(secure / "admin.toml"),
        "RMQ_CA_FILE": str(secure / "tls" / "ca.crt"),
    }
    ca = secure / "tls" / "ca.crt"
    for port in (9878, 9868, 9858, 10911, 10912, 10921, 10922, 10931, 10932):
        assert tls_handshake(port, ca).startswith("TLSv1."), port
    for port in (10913, 10923, 10933):  # gRPC, over TLS only
        assert tls_handshake(port, ca, ["h2"]).startswith("TLSv1."), port

    def as_admin(*args: str) -> subprocess.CompletedProcess[str]:
        return rmqctl(*args, env=env)

    assert [r[4] for r in rows[4:]].count("master") == 1
    made = as_admin("updateTopic", "-t", "SecureTopic", "-q", "2")
    assert made.returncode == 0, made.stderr
    wait_until(lambda: as_admin("topicRoute", "-t", "SecureTopic").returncode == 0, "the route", 30)
    sent = as_admin("--json", "sendMessage", "-t", "SecureTopic", "-p", "secret", "--count", "5")
    assert sent.returncode == 0, sent.stderr
    got = as_admin(
        "--json", "consumeMessage", "-t", "SecureTopic", "-g", "g", "--count", "5",
        "--timeout", "20",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert [json.loads(line)["body"] for line in got.stdout.splitlines()] == ["secret"] * 5

    anonymous = rmqctl(
        "sendMessage", "-t", "SecureTopic", "-p", "x", env=dict(env, RMQ_CREDENTIALS_FILE="")
    )
    assert anonymous.returncode == 1
    assert "NO_PERMISSION (16)" in anonymous.stderr and "unsigned" in anonymous.stderr
    plaintext = rmqctl("sendMessage", "-t", "SecureTopic", "-p", "x", env=dict(env, RMQ_CA_FILE=""))
    assert plaintext.returncode == 1, plaintext.stdout
    assert "this port speaks TLS (use --tls" in plaintext.stderr, plaintext.stderr

    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=40) == 0


# A terminal of its own with the launcher as a background job in it (``make run &``): this
# process leads a new session whose controlling terminal is a fresh pty, and starts the launcher
# in a process group of its own, so the launcher is not the terminal's foreground group.
BACKGROUND_JOB = """
import fcntl, os, subprocess, sys, termios
_master, terminal = os.openpty()
os.setsid()
fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)
with open(sys.argv[1], "w") as log:
    job = subprocess.Popen(sys.argv[2:], stdin=terminal, stdout=log, stderr=log, process_group=0)
print(job.pid, flush=True)
sys.exit(job.wait())
"""


def test_make_run_in_the_background_of_a_terminal_keeps_running(
    launchers: Launchers, tmp_path: Path
) -> None:
    """``make run &``: the launcher reads its console for "r" + Enter; a background job that reads
    its terminal is stopped by SIGTTIN, and with it the table and the handling of deaths. It
    runs on (the read fails and is tried again), and Ctrl-C's SIGINT still stops it."""
    shell = subprocess.Popen(
        [sys.executable, "-c", BACKGROUND_JOB, str(tmp_path / "launcher.log"), *launchers.argv()],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    job = 0
    try:
        assert shell.stdout is not None
        job = int(shell.stdout.readline())
        rows = launchers.ready(timeout=60)
        assert alive(job), "the launcher exited"
        state = Path(f"/proc/{job}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T", "the launcher is stopped"
        os.kill(job, signal.SIGINT)
        assert shell.wait(timeout=60) == 0
        assert not [p for p in daemon_pids(rows) if alive(p)]
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
        if job and alive(job):
            os.kill(job, signal.SIGKILL)


def broker_configs() -> list[dict[str, object]]:
    """getBrokerConfig of every broker of make run's cluster ([] if any failed)."""
    done = rmqctl("--json", "getBrokerConfig", "-c", "DefaultCluster")
    if done.returncode != 0:
        return []
    brokers: list[dict[str, object]] = json.loads(done.stdout)["brokers"]
    return brokers


def test_a_live_config_change_under_make_run_survives_its_restart(
    launchers: Launchers, tmp_path: Path
) -> None:
    """Every broker of make run runs from --broker-config and never writes it:
    updateBrokerConfig keeps a change in each broker's data directory, and a second make run
    keeps it; a key changed meanwhile in --broker-config is taken by every broker at that start,
    and wins over a live change of the same key (whose entry is dropped)."""
    shared = launchers.config
    shared_before = shared.read_text()
    launcher = launchers.start()
    launchers.ready()
    for key, value in (("retention_hours", "24"), ("max_pull_batch", "9")):
        changed = rmqctl(
            "--json", "updateBrokerConfig", "-c", "DefaultCluster", "-k", key, "-v", value
        )
        assert changed.returncode == 0, changed.stderr
    live = [tmp_path / "var" / f"broker-a-{i}" / "config" / "liveConfig.json" for i in range(3)]
    written = sorted((b["persisted"], b["liveFile"]) for b in json.loads(changed.stdout)["brokers"])
    assert written == [(True, str(path)) for path in live]
    assert all(path.exists() for path in live)
    assert shared.read_text() == shared_before  # never written
    assert not list((tmp_path / "var").glob("*.toml"))  # no per-broker copies
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=40) == 0

    # Meanwhile the operator edits the shared file: a new key, and max_pull_batch changed live.
    shared.write_text(shared_before + "max_pull_batch = 17\nflush_interval_ms = 250\n")
    launchers.start("second.log")
    launchers.ready("second.log")
    wait_until(
        lambda: len(broker_configs()) == 3,
        "getBrokerConfig of the three brokers after make run again",
        60,
        interval=0.5,
    )
    configs = broker_configs()
    assert [str(b["configFile"]) for b in configs] == [str(shared)] * 3
    for broker in configs:
        config = broker["config"]
        assert isinstance(config, dict)
        assert config["retention_hours"] == 24.0  # the live change survived
        assert config["max_pull_batch"] == 17  # the file's new value wins over the live 9
        assert config["flush_interval_ms"] == 250  # the shared file's edit reached it
        changed_live = broker["changedLive"]  # the max_pull_batch entry dropped
        assert isinstance(changed_live, dict) and list(changed_live) == ["retention_hours"]
        assert changed_live["retention_hours"]["startValue"] == 72.0
        assert (
            config["commitlog_segment_bytes"]
            == tomllib.loads(shared_before)["commitlog_segment_bytes"]
        )
    log = (tmp_path / "second.log").read_text()
    assert log.count("live config change of max_pull_batch dropped") == 3
