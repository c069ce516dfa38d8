"""A Spark standalone cluster on 127.0.0.1: one master and its workers, started from the
installed PySpark (``spark-class``), each with its web UI.

    python -m deploy.spark_cluster start [--workers 2] [--cores 1] [--memory 2g] [--port 7077]
                                         [--webui-port 8080] [--dir DIR]
    python -m deploy.spark_cluster status [--dir DIR]
    python -m deploy.spark_cluster stop [--dir DIR]

(``deploy/spark-cluster.sh`` runs the same with the repository's Python.) ``start`` returns once
every worker has registered with the master, which the master's JSON state says
(``http://127.0.0.1:<webui-port>/json/``), prints the master URL and the web UIs, and leaves the
daemons running in the background, each in its own process group, with their process ids,
ports and logs in DIR (default ``$TMPDIR/hypercup-spark``). Then

    hypercup-analyze LOGDIR --out REPORTDIR --master spark://127.0.0.1:7077

runs there (with ``SPARK_LOCAL_IP=127.0.0.1``, so the driver listens on the loopback too).
``stop`` ends the daemons: SIGTERM to each one's process group (a worker's executors are its
children), SIGKILL after a grace period. ``SparkStandalone`` is the same as a context manager for
tests and the benchmark: leaving the ``with`` block always stops what it started.

Everything binds to 127.0.0.1 (``SPARK_LOCAL_IP``); nothing here is meant to face a network.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

import pyspark

from deploy.cluster import free_ports

HOST = "127.0.0.1"
READY_TIMEOUT = 120.0
STOP_GRACE = 15.0
SPARK_HOME = Path(pyspark.__file__).resolve().parent
"""A pip-installed PySpark is a Spark distribution: ``bin/spark-class`` and ``jars/``."""
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STATE_FILE = "cluster.json"


class SparkClusterError(RuntimeError):
    """A daemon did not start or the cluster did not come up; the message has its log's tail."""


@dataclass(frozen=True, slots=True)
class Daemon:
    """One running daemon, as ``stop`` finds it again: its process id (also its process group),
    its web UI and its log."""

    name: str
    pid: int
    webui: str
    log: str


@dataclass(frozen=True, slots=True)
class ClusterState:
    """What ``start`` leaves in ``DIR/cluster.json``."""

    master_url: str
    master: Daemon
    workers: tuple[Daemon, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data = json.loads(text)
        return cls(
            master_url=data["master_url"],
            master=Daemon(**data["master"]),
            workers=tuple(Daemon(**w) for w in data["workers"]),
        )


def default_directory() -> Path:
    return Path(tempfile.gettempdir()) / "hypercup-spark"


def daemon_environment(directory: Path) -> dict[str, str]:
    """The daemons' environment: this PySpark as SPARK_HOME, everything on 127.0.0.1, no REST
    submission server on the master (a fixed port, 6066, and not needed: applications connect
    to the master's port), and this Python for any Python an executor would start (DataFrame
    jobs start none)."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_WORKER_DIR": str(directory / "work"),
        "PYSPARK_PYTHON": sys.executable,
    }


class SparkStandalone:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, started on
    ``__enter__`` (or ``start``) and stopped on ``__exit__`` (or ``stop``)."""

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "2g",
        port: int | None = None,
        webui_port: int | None = None,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError("a cluster needs at least one worker with one core")
        self.directory = Path(directory) if directory is not None else default_directory()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        spare = free_ports(2 + workers)
        self.port = port or spare[0]
        self.webui_port = webui_port or spare[1]
        self.worker_ui_ports = spare[2:]
        self.master_url = f"spark://{HOST}:{self.port}"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.state: ClusterState | None = None

    def __enter__(self) -> SparkStandalone:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ClusterState:
        """Start the master, then the workers side by side; return once all are registered.
        Each daemon is recorded in ``DIR/cluster.json`` as soon as it is started, so that
        ``stop`` (this one's or the command's) finds it even if this process dies meanwhile."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if (self.directory / STATE_FILE).exists():
            raise SparkClusterError(
                f"{self.directory} holds a running cluster's state; stop it first"
            )
        environment = daemon_environment(self.directory)
        try:
            master = self._spawn(
                "master",
                [MASTER_CLASS, "--host", HOST, "--port", str(self.port),
                 "--webui-port", str(self.webui_port)],
                self.webui_port,
                environment,
            )  # fmt: skip
            self._record(ClusterState(self.master_url, master, ()))
            self._wait(lambda state: state.get("status") == "ALIVE", "the master to come up")
            workers: tuple[Daemon, ...] = ()
            for k, ui_port in enumerate(self.worker_ui_ports):
                workers += (self._spawn_worker(k, ui_port, environment),)
                self._record(ClusterState(self.master_url, master, workers))
            self._wait(
                lambda state: alive_workers(state) == self.workers,
                f"{self.workers} workers to register",
            )
        except BaseException:
            self.stop()
            raise
        assert self.state is not None
        return self.state

    def _record(self, state: ClusterState) -> None:
        self.state = state
        (self.directory / STATE_FILE).write_text(state.to_json())

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master; forget the state."""
        end_groups([process.pid for process in reversed(self.processes)])
        for process in self.processes:
            process.wait()
        self.processes.clear()
        if self.state is not None:
            (self.directory / STATE_FILE).unlink(missing_ok=True)
        self.state = None

    def master_state(self) -> dict:
        """The master's JSON state (workers, running and completed applications)."""
        return master_state(self.webui_port)

    def _spawn_worker(self, k: int, webui_port: int, environment: dict[str, str]) -> Daemon:
        arguments = [
            WORKER_CLASS, "--host", HOST, "--cores", str(self.cores), "--memory", self.memory,
            "--webui-port", str(webui_port), self.master_url,
        ]  # fmt: skip
        return self._spawn(f"worker{k}", arguments, webui_port, environment)

    def _spawn(
        self, name: str, arguments: list[str], webui_port: int, environment: dict[str, str]
    ) -> Daemon:
        log = self.directory / f"{name}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *arguments],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
                start_new_session=True,
            )
        self.processes.append(process)
        return Daemon(name, process.pid, f"http://{HOST}:{webui_port}", str(log))

    def _wait(self, ready: Callable[[dict], bool], what: str) -> None:
        """Poll the master's state until ``ready(state)``; a daemon that exits, or the timeout,
        is an error that shows the logs' tails."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            exited = [p for p in self.processes if p.poll() is not None]
            if exited:
                raise SparkClusterError(
                    f"a daemon exited while waiting for {what}:\n{self._tails()}"
                )
            try:
                if ready(master_state(self.webui_port)):
                    return
            except (OSError, ValueError):
                pass  # the master's web UI is not up yet
            time.sleep(0.2)
        raise SparkClusterError(f"timed out waiting for {what}:\n{self._tails()}")

    def _tails(self) -> str:
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}"
            for log in sorted(self.directory.glob("*.log"))
        )


def master_state(webui_port: int) -> dict:
    with urllib.request.urlopen(f"http://{HOST}:{webui_port}/json/", timeout=5) as reply:
        return json.loads(reply.read())


def alive_workers(state: dict) -> int:
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def is_spark_daemon(pid: int) -> bool:
    """Whether ``pid`` runs a Spark master or worker."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return MASTER_CLASS.encode() in command or WORKER_CLASS.encode() in command


def group_alive(pgid: int) -> bool:
    """Whether any process is left in the process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def end_groups(pgids: list[int]) -> None:
    """SIGTERM the process groups of daemons we started (each leads its own: a worker's
    executors are in its group), wait until they are empty, SIGKILL what is left after
    ``STOP_GRACE`` seconds."""
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE
    while time.monotonic() < deadline and any(group_alive(g) for g in pgids):
        time.sleep(0.1)
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def stop_recorded(state: ClusterState) -> None:
    """Stop the daemons of a cluster another process started (``start``, then ``stop``). A
    recorded group is signalled only while its leader still runs a Spark daemon, or has ended
    leaving its executors: a process id is not given to a new process while its group lives, so
    such a group is still ours."""
    pgids = [
        d.pid
        for d in (*state.workers, state.master)
        if group_alive(d.pid) and (is_spark_daemon(d.pid) or not Path(f"/proc/{d.pid}").exists())
    ]
    end_groups(pgids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.spark_cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=("start", "status", "stop"))
    parser.add_argument("--dir", type=Path, default=default_directory(), help="state and logs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="2g", help="memory per worker")
    parser.add_argument("--port", type=int, default=7077, help="the master's port")
    parser.add_argument("--webui-port", type=int, default=8080, help="the master's web UI")
    args = parser.parse_args(argv)
    state_file = args.dir / STATE_FILE
    if args.command == "start":
        cluster = SparkStandalone(
            args.dir,
            workers=args.workers,
            cores=args.cores,
            memory=args.memory,
            port=args.port,
            webui_port=args.webui_port,
        )
        try:
            state = cluster.start()
        except SparkClusterError as error:
            print(f"spark-cluster: error: {error}", file=sys.stderr)
            return 2
        print(f"master {state.master_url}, web UI {state.master.webui}")
        for worker in state.workers:
            print(f"{worker.name} web UI {worker.webui}, log {worker.log}")
        print(
            f"state in {state_file}; stop with: python -m deploy.spark_cluster stop --dir {args.dir}"
        )
        return 0
    if not state_file.exists():
        print(f"spark-cluster: no cluster recorded in {args.dir}", file=sys.stderr)
        return 2 if args.command == "status" else 0
    state = ClusterState.from_json(state_file.read_text())
    if args.command == "stop":
        stop_recorded(state)
        state_file.unlink()
        print(f"stopped {state.master_url}")
        return 0
    port = int(state.master.webui.rsplit(":", 1)[1])
    try:
        print(json.dumps(master_state(port), indent=2))
    except OSError as error:
        print(f"spark-cluster: the master does not answer: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
