"""A local cluster: N super-peer daemons (separate processes) on 127.0.0.1 forming a hypercube,
and optionally M peer daemons attached to them.

    python -m deploy.cluster --superpeers 8 [--peers 4] [--base-port 7400] [--data-dir DIR]
                             [--no-http]

starts the super-peers one after the other (each new one joins through a random member, as operators
would), waits until every one is a member, then starts the peers (``peer keygen`` and ``peer run``,
attached round-robin, each in its own data directory, so ``peer subscribe ... --data-dir DIR``
drives them), prints where everything is (with each super-peer's status page, an HTTP endpoint
on a free loopback port), and stops them all cleanly (peers first) on Ctrl-C or
SIGTERM. With TLS (the default) the launcher first does what an operator does once: creates a
network CA in the cluster's directory, a key for every super-peer, and a certificate for it (2048-bit
keys, so a local cluster starts in seconds; ``--key-bits 3072`` for production sizes). ``Cluster`` is the same thing as a context manager, for the replay tool, the demo and the
tests: leaving the ``with`` block always stops every process it started (SIGTERM, then SIGKILL
after a grace period), so nothing is left running.

With ``hosts`` (``--hosts netns``, root only: ``deploy.hosts``) every daemon runs on a host of its
own: a network namespace with its own address on a virtual bridge. Super-peers listen on their
host's address (port 7400 on every host), are certified for it and for their host name, and join
by host name (``sp3.hosts``); peers run on hosts of their own and reach their access points
across the bridge. No proxy: cuts are the hosts' own (``NetnsHosts.partition``, ``isolate``).

A daemon may run with its wall clock off (``skews``, ``peer_skews``, ``set_skew``): it starts under
Debian's ``faketime`` library (``LD_PRELOAD`` libfaketime, ``FAKETIME=+S``, and
``DONT_FAKE_MONOTONIC=1``: its monotonic clock stays true, as after a bad NTP step or a VM
restored from a snapshot), for the clock tests and the fault harness's ``skew`` fault.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import trio

import crypto
from deploy.hosts import NetnsHosts
from superpeer.cli import ControlUnavailable, control, control_blocking
from superpeer.config import SuperPeerConfig

READY_TIMEOUT = SuperPeerConfig().limits.join_contact_seconds + 30.0
"""How long a daemon may take to say it is ready: a super-peer that joins asks its contacts
again for ``join_contact_seconds`` while none answers (a cube busy repairing, a cut), and says
"listening on" only once it joined. 30 s was less than that: a chaos run (stop 84, seed 842)
gave up on a join that succeeded a moment later."""
HOST_PORT = 7400
"""The port every super-peer listens on, on its own host (``hosts``)."""


def _lines(descriptor: int, deadline: float) -> Iterator[bytes]:
    """The lines a process writes to the pipe ``descriptor`` until it closes it or the
    ``deadline`` (``time.monotonic``) passes, whichever comes first: a read that would block
    past the deadline is not made (``readline`` on a quiet pipe waits for ever)."""
    pending = b""
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([descriptor], [], [], remaining)
        if not ready:
            return
        chunk = os.read(descriptor, 65536)
        if not chunk:
            return
        *lines, pending = (pending + chunk).split(b"\n")
        yield from lines


class ClusterError(RuntimeError):
    """A daemon did not start (its stderr tail is in the message)."""


def faketime_library() -> str | None:
    """Debian's libfaketime (package ``faketime``), if installed."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def skewed_environment(seconds: float) -> dict[str, str] | None:
    """The environment of a process whose wall clock is ``seconds`` off (whole seconds), its
    monotonic clock untouched; None (the inherited one) for no skew."""
    if round(seconds) == 0:
        return None
    library = faketime_library()
    if library is None:
        raise ClusterError("a skewed clock needs Debian's faketime (apt-get install faketime)")
    environment = dict(os.environ)
    preload = environment.get("LD_PRELOAD", "")
    environment["LD_PRELOAD"] = f"{library} {preload}".strip()
    environment["FAKETIME"] = f"{round(seconds):+d}"
    environment["DONT_FAKE_MONOTONIC"] = "1"
    environment["FAKETIME_DONT_RESET"] = "1"  # its children (none) would keep the offset
    return environment


def free_ports(count: int) -> list[int]:
    """Ports the kernel says are free now (bound and released; fine on a quiet loopback)."""
    sockets = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            sockets.append(probe)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for probe in sockets:
            probe.close()


def terminate(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM ``process`` if it runs, wait ``grace`` seconds, then SIGKILL."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Cluster:
    """Start ``size`` super-peers; ``addresses`` and ``directories`` are in start order."""

    def __init__(
        self,
        size: int,
        *,
        directory: str | Path | None = None,
        base_port: int | None = None,
        seed: int = 0,
        trace: bool = True,
        tls: bool = True,
        key_bits: int = 2048,
        extra_args: tuple[str, ...] = (),
        peers: int = 0,
        front: Callable[[str], str] | None = None,
        settings: str = "",
        http: bool = False,
        skews: dict[int, float] | None = None,
        peer_skews: dict[int, float] | None = None,
        hosts: NetnsHosts | None = None,
        peer_settings: str = "",
        peer_fallbacks: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one super-peer")
        if hosts is not None and front is not None:
            raise ValueError("hosts of their own need no proxies in front")
        self.size = size
        self._owned = directory is None
        self.root = Path(directory or tempfile.mkdtemp(prefix="cluster-"))
        self.hosts = hosts
        ports = list(range(base_port, base_port + size)) if base_port else free_ports(size)
        self._front = front
        """Given a daemon's listen address, the address it advertises (a proxy in front of it,
        ``deploy.proxy``); None: the listen address itself."""
        self._settings = settings
        """More of every super-peer's TOML configuration (sections such as ``[limits]``)."""
        self._peer_settings = peer_settings
        """Every peer daemon's TOML configuration (top-level keys such as ``silence_seconds``)."""
        self._peer_fallbacks = peer_fallbacks
        """Every peer knows every super-peer (its access point first, then the others in
        order): it goes to the next one when its access point cannot be reached."""
        self.listen_addresses = [self._listen(k, port) for k, port in enumerate(ports)]
        self.addresses = [self._public(a) for a in self.listen_addresses]
        self.directories = [self.root / f"sp{k}" for k in range(size)]
        self.processes: list[subprocess.Popen[bytes] | None] = []
        self.peer_directories = [self.root / f"peer{j}" for j in range(peers)]
        self.peer_processes: list[subprocess.Popen[bytes] | None] = []
        self._random = random.Random(seed)
        self._trace = trace
        self.tls = tls
        self._key_bits = key_bits
        self._extra = extra_args
        self.ca_directory = self.root / "ca"
        self._http = http
        self.skews = dict(skews or {})
        """Per super-peer index, how far its wall clock is off (from its next start)."""
        self.peer_skews = dict(peer_skews or {})
        """Per peer index, likewise."""
        self.http_addresses: list[str | None] = []
        """Each super-peer's operator endpoint (``http://127.0.0.1:PORT``), with ``http``."""
        self._adding = threading.Lock()
        """Held while ``add`` takes the next index: the chaos harness's fault threads add
        super-peers concurrently (two overlapping joins once took the same name, ``sp24``)."""

    def _listen(self, k: int, port: int) -> str:
        """Super-peer ``k``'s listen address: on its own host, or on 127.0.0.1."""
        if self.hosts is None:
            return f"127.0.0.1:{port}"
        return f"{self.hosts.add(f'sp{k}')}:{HOST_PORT}"

    def join_address(self, k: int) -> str:
        """How the others reach super-peer ``k`` to join: its host's name, on hosts of their
        own; its (public) address otherwise."""
        if self.hosts is None:
            return self.addresses[k]
        return f"{self.hosts.hostname(f'sp{k}')}:{HOST_PORT}"

    @property
    def ca_certificate(self) -> Path:
        """The network CA's certificate: what a peer of this cluster trusts."""
        return self.ca_directory / "ca-cert.pem"

    def _certify(self, k: int) -> None:
        """An operator's set-up of super-peer ``k``: its key and the CA's certificate for it."""
        identity = self.directories[k] / "identity"
        identity.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = crypto.generate_private_key(self._key_bits)
        crypto.save_private_key(key, identity / "key.pem")
        names: tuple[str, ...] = ("127.0.0.1", "localhost")
        if self.hosts is not None:
            host = self.listen_addresses[k].rpartition(":")[0]
            names = (host, self.hosts.hostname(f"sp{k}"), *names)
        certificate = crypto.issue_certificate(
            self.ca_directory, node_key=key, node_id=f"sp{k}", hosts=names
        )
        crypto.save_certificate(certificate, identity / "cert.pem")
        shutil.copyfile(self.ca_certificate, identity / "ca.pem")

    def __enter__(self) -> Cluster:
        try:
            if self.tls:
                crypto.init_ca(self.ca_directory, name="local cluster CA", bits=self._key_bits)
            for k in range(self.size):
                if self.tls:
                    self._certify(k)
                self._start(k)
                self._settle(k + 1)
            for j in range(len(self.peer_directories)):
                self.start_peer(j)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- one daemon at a time (the replay tool and the fault harness) ----------------------------
    def live(self) -> list[int]:
        return [k for k, p in enumerate(self.processes) if p is not None and p.poll() is None]

    def kill(self, k: int) -> None:
        """``kill -9`` super-peer ``k``: no goodbye, its data directory stays."""
        process = self.processes[k]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        if process is not None and process.stdout is not None:
            process.stdout.close()  # (restart replaces the process)

    def restart(self, k: int) -> None:
        """Start super-peer ``k`` again on its data directory, joining through a live member."""
        if self.processes[k] is not None and self.processes[k].poll() is None:
            raise ClusterError(f"super-peer {k} is running")
        self._start(k)

    def leave(self, k: int, grace: float = 60.0) -> None:
        """Stop super-peer ``k`` cleanly (SIGTERM: it hands its peers over and leaves; cut off from
        every super-peer, it waits up to ``reform_seconds`` for one, as systemd's 60 s allow)."""
        process = self.processes[k]
        if process is not None:
            terminate(process, grace)

    def add(self) -> int:
        """A new super-peer joins the running backbone; its index."""
        with self._adding:
            k = len(self.directories)
            port = free_ports(1)[0]
            self.listen_addresses.append(self._listen(k, port))
            self.addresses.append(self._public(self.listen_addresses[-1]))
            self.directories.append(self.root / f"sp{k}")
            self.processes.append(None)
        if self.tls:
            self._certify(k)
        self._start(k)
        return k

    def _public(self, listen: str) -> str:
        return self._front(listen) if self._front is not None else listen

    def pause(self, k: int) -> None:
        """SIGSTOP super-peer ``k``: it holds its connections and answers nothing."""
        process = self.processes[k]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGSTOP)

    def resume(self, k: int) -> None:
        process = self.processes[k]
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)

    def kill_peer(self, j: int) -> None:
        """``kill -9`` peer daemon ``j`` (its data directory stays)."""
        process = self.peer_processes[j]
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def stop_peer(self, j: int, grace: float = 15.0) -> int | None:
        """SIGTERM peer daemon ``j``; its exit code."""
        process = self.peer_processes[j]
        if process is None:
            return None
        terminate(process, grace)
        return process.returncode

    def peer_running(self, j: int) -> bool:
        process = self.peer_processes[j]
        return process is not None and process.poll() is None

    def _start(self, k: int) -> None:
        directory = self.directories[k]
        directory.mkdir(parents=True, exist_ok=True)
        settings = []
        if self.addresses[k] != self.listen_addresses[k]:
            settings.append(f'advertise = "{self.addresses[k]}"\n')
        if not self._trace:
            settings.append("[trace]\nenabled = false\n")
        if not self.tls:
            settings.append("[security]\ntls = false\n")
        if self._settings:
            settings.append(
                self._settings if self._settings.endswith("\n") else self._settings + "\n"
            )
        if settings:
            (directory / "superpeer.toml").write_text("".join(settings))
        command = [
            *self._on_host(f"sp{k}"), sys.executable, "-m", "superpeer.cli", "run",
            "--listen", self.listen_addresses[k], "--data-dir", str(directory), "--node-id", f"sp{k}",
        ]  # fmt: skip
        if settings:
            command += ["--config", str(directory / "superpeer.toml")]
        live = [j for j in self.live() if j != k]
        if live:
            command += ["--join", self.join_address(self._random.choice(live))]
            command += [a for j in live for a in ("--join", self.join_address(j))]
        if self._http:
            command += ["--http", f"127.0.0.1:{free_ports(1)[0]}"]
        command += list(self._extra)
        environment = skewed_environment(self.skews.get(k, 0.0))
        with (directory / "stderr.log").open("ab") as stderr:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=stderr, env=environment
            )
        while len(self.processes) <= k:
            self.processes.append(None)
        self.processes[k] = process
        assert process.stdout is not None
        while len(self.http_addresses) <= k:
            self.http_addresses.append(None)
        listening = False
        for line in _lines(process.stdout.fileno(), time.monotonic() + READY_TIMEOUT):
            if b" status page " in line:
                page = line.split(b" status page ")[1].strip().decode()
                self.http_addresses[k] = page.rstrip("/")
            if b"listening on" in line:
                listening = True
                break
        if not listening:
            process.kill()
            tail = (directory / "stderr.log").read_text(errors="replace")[-2000:]
            raise ClusterError(f"super-peer {k} did not start:\n{tail}")

    def start_peer(
        self,
        j: int,
        k: int | None = None,
        *,
        wait: bool = True,
        fallbacks: tuple[int, ...] = (),
        settings: str | None = None,
    ) -> None:
        """Peer ``j``: its key (with TLS, the first time), then its daemon, attached to
        super-peer ``k`` (default ``j mod N``), with ``fallbacks`` as the super-peers it goes to
        when that one is down (``--superpeer`` repeated), and ``settings`` as its TOML (default:
        every peer's); with ``wait``, returns once the daemon is connected and identified
        (``peer status``)."""
        directory = self.peer_directories[j]
        fresh = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        peer = [sys.executable, "-m", "peer.cli"]
        if self.tls and fresh:
            subprocess.run(
                [*peer, "keygen", "--data-dir", str(directory), "--bits", str(self._key_bits)],
                check=True,
                capture_output=True,
            )
        trust = ["--ca", str(self.ca_certificate)] if self.tls else ["--no-tls"]
        first = j % self.size if k is None else k
        if not fallbacks and self._peer_fallbacks:
            count = len(self.addresses)
            fallbacks = tuple((first + n) % count for n in range(1, count))
        access = [first, *fallbacks]
        command = [
            *self._on_host(f"peer{j}"), *peer, "run",
            *(a for n in access for a in ("--superpeer", self.addresses[n])),
            "--data-dir", str(directory), *trust,
        ]  # fmt: skip
        settings = self._peer_settings if settings is None else settings
        if settings:
            (directory / "peer.toml").write_text(settings)
            command += ["--config", str(directory / "peer.toml")]
        log = directory / "daemon.log"
        environment = skewed_environment(self.peer_skews.get(j, 0.0))
        with log.open("ab") as output:
            process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=environment
            )
        while len(self.peer_processes) <= j:
            self.peer_processes.append(None)
        self.peer_processes[j] = process
        if not wait:
            return
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            status = subprocess.run(
                [*peer, "status", "--json", "--data-dir", str(directory)],
                capture_output=True,
                check=False,
            )
            if status.returncode == 0 and json.loads(status.stdout).get("connected"):
                return
            time.sleep(0.05)
        process.kill()
        process.wait()
        tail = log.read_text(errors="replace")[-2000:]
        raise ClusterError(f"peer {j} did not connect:\n{tail}")

    def _on_host(self, name: str) -> list[str]:
        """What runs a command on host ``name`` (nothing on 127.0.0.1)."""
        if self.hosts is None:
            return []
        self.hosts.add(name)
        return self.hosts.prefix(name)

    def _settle(self, running: int, timeout: float = 30.0) -> None:
        if not self._wait_settled(running, timeout):
            raise ClusterError("the backbone did not settle")

    def _wait_settled(self, running: int, timeout: float) -> bool:
        """Whether, within ``timeout``, the first ``running`` daemons are all members with no
        topology operation under way: HyperCuP runs one departure at a time, and never beside a
        join (see ``hypercup``), so the launcher starts and stops one daemon at a time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            statuses = [self._status_or_none(k) for k in range(running) if k in self.live()]
            if all(s is not None and s["state"] == "member" and not s["waiting"] for s in statuses):
                return True
            time.sleep(0.02)
        return False

    def _status_or_none(self, k: int) -> dict | None:
        try:
            return self.status(k)
        except ControlUnavailable:
            return None

    def status(self, k: int) -> dict:
        reply = control_blocking(self.directories[k], "status")
        return json.loads(reply.body)

    async def statuses(self) -> list[dict]:
        """Every daemon's status, asked concurrently (for use inside a trio program)."""
        results: list[dict] = [{} for _ in range(len(self.directories))]

        async def ask(k: int) -> None:
            try:
                reply = await control(self.directories[k], "status")
                results[k] = json.loads(reply.body)
            except ControlUnavailable:
                results[k] = {}

        async with trio.open_nursery() as nursery:
            for k in self.live():
                nursery.start_soon(ask, k)
        return results

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every daemon (peers first, then super-peers, last started first, so the cube
        shrinks in order), wait, then SIGKILL whatever is still running."""
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a paused one must hear the SIGTERM
        for process in self.peer_processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.peer_processes:
            if process is None:
                continue
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.peer_processes.clear()
        for k in reversed(range(len(self.processes))):
            process = self.processes[k]
            if process is None:
                continue
            terminate(process, grace)
            if process.stdout is not None:
                process.stdout.close()
            if k and self.live():
                self._wait_settled(k, timeout=grace)
        self.processes.clear()
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--superpeers", type=int, default=8)
    parser.add_argument(
        "--peers", type=int, default=0, help="peer daemons to start too (round-robin)"
    )
    parser.add_argument("--base-port", type=int, help="first port (default: free ports)")
    parser.add_argument(
        "--data-dir", help="where the daemons keep their data (default: a temp dir)"
    )
    parser.add_argument("--key-bits", type=int, default=2048)
    parser.add_argument(
        "--no-tls", action="store_true", help="plaintext (to measure what TLS costs)"
    )
    parser.add_argument(
        "--no-http", action="store_true", help="no HTTP endpoints (metrics, status pages)"
    )
    parser.add_argument(
        "--hosts",
        choices=("loopback", "netns"),
        default="loopback",
        help="netns: every daemon on a host of its own (a network namespace; root only)",
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        hosts = stack.enter_context(NetnsHosts()) if args.hosts == "netns" else None
        cluster = stack.enter_context(
            Cluster(
                args.superpeers,
                directory=args.data_dir,
                base_port=args.base_port,
                tls=not args.no_tls,
                key_bits=args.key_bits,
                peers=args.peers,
                http=not args.no_http and hosts is None,
                hosts=hosts,
            )
        )
        for k, address in enumerate(cluster.addresses):
            page = cluster.http_addresses[k]
            status = f" status page {page}/" if page else ""
            print(f"sp{k} {address} data={cluster.directories[k]}{status}", flush=True)
        for j, directory in enumerate(cluster.peer_directories):
            access = cluster.addresses[j % cluster.size]
            url_file = directory / "ui.url"
            web = f" web app {url_file.read_text().strip()}" if url_file.exists() else ""
            print(f"peer{j} -> {access}: peer status --data-dir {directory}{web}", flush=True)
        if cluster.tls:
            print(f"network CA certificate (peers trust it): {cluster.ca_certificate}", flush=True)
        print("running; Ctrl-C stops every daemon", flush=True)
        wait_for_stop_signal()
    return 0


def wait_for_stop_signal() -> None:
    """Blocks until SIGINT or SIGTERM (Ctrl-C), which then stops nothing by itself: the caller
    stops what it started."""
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    signal.sigwait(stop_signals)


if __name__ == "__main__":
    sys.exit(main())
