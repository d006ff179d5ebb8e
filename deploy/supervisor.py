"""The launcher's loop while the local cluster runs: deaths, restarts on request, status.

:class:`Supervisor` runs on the main thread, the only one that starts daemons (the parent-death
signal follows the thread that started a child; lines typed on the console reach it through a
queue, :func:`read_requests`). It reports each daemon that dies and keeps the others running,
restarts every dead daemon when ``r`` and Enter is typed, prints the table of processes once the
cluster is ready, and after a death or a restart tells what the failover came to. However it
ends, it stops the daemons in order.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import IO

from deploy.cluster_layout import BROKER_GROUP, BROKERS, LaunchRefused, broker_process_name
from deploy.cluster_status import (
    RESTART_KEY,
    cluster_table,
    death_text,
    group_state,
    ready_text,
)
from deploy.daemons import Console, LocalCluster
from deploy.secure_mode import create_super_user


def read_requests(stream: IO[str], requests: queue.Queue[str]) -> threading.Thread:
    """A thread handing each line typed on the console to the main loop (which alone starts
    daemons: the parent-death signal follows the thread that started a child)."""

    def read() -> None:
        while True:
            try:
                line = stream.readline()
            except OSError:  # EIO: a background job reading its terminal (SIGTTIN ignored)
                time.sleep(1.0)
                continue
            except ValueError:  # closed
                return
            if not line:  # end of input: nobody will type
                return
            requests.put(line.strip())

    thread = threading.Thread(target=read, name="console-input", daemon=True)
    thread.start()
    return thread


class Supervisor:
    def __init__(self, cluster: LocalCluster, console: Console, names: list[str]) -> None:
        """``names``: every daemon's name, in start order (controllers before brokers)."""
        self.cluster = cluster
        self.console = console
        self.names = names
        self.requests: queue.Queue[str] = queue.Queue()
        """The lines typed on the console (:func:`read_requests` fills it)."""
        self.stopping = False
        self._ready = False
        self._started = 0.0
        self._reminded = False
        self._dead: dict[str, int] = {}
        """The daemons that exited and were not restarted yet, with their exit status."""
        self._watching = False  # after a death or a restart: until the group's state is told
        self._watch_since = 0.0
        self._last_state = ""
        self._next_look = 0.0

    def stop(self, signum: int, frame: object) -> None:
        """The signal handler of Ctrl-C and its kin: the loop ends, the daemons are stopped."""
        self.stopping = True

    def run(self) -> int:
        """Start the daemons (in secure mode, then the super user) and watch them until stopped;
        stop them however it ends. Returns the launcher's exit status (2: a refused start)."""
        cluster, console = self.cluster, self.console
        status = 0
        self._started = time.monotonic()
        try:
            cluster.start()
            if cluster.security is not None:
                create_super_user(cluster.security, say=console.say, stopping=lambda: self.stopping)
            while not self.stopping:
                self._report_deaths()
                self._take_requests()
                self._look()
                time.sleep(0.2 if not self._ready else 0.3)
        except LaunchRefused as exc:
            console.say(f"local cluster: {exc}")
            status = 2
        finally:
            console.say("local cluster: stopping (slaves, master, then controllers)")
            cluster.stop()
        console.say("local cluster stopped")
        return status

    def _report_deaths(self) -> None:
        for name, code in self.cluster.exited():
            if name not in self._dead:
                self._dead[name] = code
                self._watching, self._watch_since = True, time.monotonic()
                self.console.say(death_text(name, code))

    def _take_requests(self) -> None:
        console = self.console
        while not self.requests.empty():
            typed = self.requests.get()
            if typed.lower() != RESTART_KEY:
                if typed:
                    console.say(f"local cluster: {RESTART_KEY} and Enter restarts the dead")
                continue
            if not self._dead:
                console.say("local cluster: every daemon is running; nothing to restart")
                continue
            for name in sorted(self._dead, key=self.names.index):  # controllers before brokers
                self.cluster.start(name)
                pid = self.cluster.children[name].pid
                console.say(f"local cluster: restarting {name} (PID {pid})")
            self._dead.clear()
            self._watching, self._watch_since = True, time.monotonic()

    def _look(self) -> None:
        """Until ready: the table once the cluster is; after a death or a restart: the group's
        state once it changes, until every live broker is in sync."""
        cluster, console = self.cluster, self.console
        now = time.monotonic()
        pids = {n: p.pid for n, p in cluster.children.items() if p.poll() is None}
        if not self._ready:
            # A broker that exited (a refused start, say) does not hold the table back: the
            # others are a working group, and its row says it exited.
            found = cluster_table(pids, cluster.rmqctl_args, self._dead)
            if found is not None:
                console.say(ready_text(*found, security=cluster.security))
                self._ready = True
                self._watching = False
            elif not self._reminded and now - self._started > 30:
                self._reminded = True
                console.say(
                    f"local cluster: {BROKER_GROUP} has no master with every replica in sync "
                    f"yet, or a broker does not yet say the role the controllers give it; "
                    f"`rmqctl getSyncStateSet -b {BROKER_GROUP}` shows where it stands"
                )
        elif self._watching and now >= self._next_look:
            # Every second for a minute, then every 5 s (a group that cannot elect).
            self._next_look = now + (1.0 if now - self._watch_since < 60 else 5.0)
            live = [i for i in range(len(BROKERS)) if broker_process_name(i) in pids]
            state = group_state(live, cluster.rmqctl_args)
            if state is not None and state[0] != self._last_state:
                console.say(state[0])
                self._last_state = state[0]
            self._watching = state is None or not state[1]
