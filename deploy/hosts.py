"""Hosts of their own for the daemons of a local cluster: one Linux network namespace each, with its
own address on a virtual bridge (root only).

    with NetnsHosts() as hosts:
        address = hosts.add("sp0")            # 10.X.Y.1, on the bridge
        command = hosts.prefix("sp0") + [...] # run a process on that host
        hosts.partition([["sp0", "sp1"], ["sp2", "sp3"]])
        hosts.heal()

A namespace is a host: the daemon binds its own address (the same port on every host), other hosts
reach it across the bridge as they would across a switch, and its name resolves on every host
(``ip netns exec`` mounts ``/etc/netns/NAME/hosts`` over ``/etc/hosts``: ``sp3.hosts``). Cuts are
nftables rules in the receivers' namespaces that drop what comes from the other side (packets
vanish: no reset, no ICMP, as across a switch that lost a link), installed and removed while the
daemons run:

* ``partition(groups)``: two hosts reach each other only if some group holds both (a host in two
  groups is a bridge that reaches both sides; a host in none is cut off from all);
* ``isolate(name)``: one host from every other one (its process runs on);
* ``cut_pair(a, b)``: one link;
* ``heal(cut)``: that cut ends (each returns its number; several may hold at once), or all;
* ``slow(name, seconds)``: every packet out of a host waits (``tc netem``).

Rules rather than moving links between bridges: a bridge host reaching both sides of a cut, and a
peer cut from its access point only, are one rule each. Everything made is removed on exit (and
by ``cleanup_stale`` if a run was killed): namespaces, the bridge, the hosts files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Final

NETNS_ETC: Final = Path("/etc/netns")
DOMAIN: Final = "hosts"
"""Hosts are named ``NAME.hosts`` on every host."""
TABLE: Final = "cut"


class HostsError(RuntimeError):
    """Network namespaces cannot be used here (not root, no ``ip``, no kernel support)."""


def unavailable() -> str | None:
    """Why network namespaces cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"network namespaces need {tool} (iproute2, nftables)"
    probe = f"probe{os.getpid() % 100000}"
    try:
        _run(["ip", "netns", "add", probe])
    except HostsError as error:
        return f"this kernel does not let us make network namespaces: {error}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


def slow_unavailable() -> str | None:
    """Why ``slow`` cannot delay packets here (None: it can): the kernel may lack ``netem``
    (``sch_netem``), as some container and microVM kernels do. Asked once, in a namespace of
    its own, before a run plans any ``slow``."""
    if shutil.which("tc") is None:
        return "slow needs tc (iproute2)"
    probe = f"netem{os.getpid() % 100000}"
    try:
        _run(["ip", "netns", "add", probe])
        inside = ["ip", "netns", "exec", probe]
        _run([*inside, "ip", "link", "set", "lo", "up"])
        _run([*inside, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
    except HostsError as error:
        return f"this kernel cannot delay packets (tc netem): {error}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def _run(command: list[str], *, check: bool = True, stdin: str | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, input=stdin, check=False)
    if check and done.returncode != 0:
        raise HostsError(f"{' '.join(command)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


class NetnsHosts:
    """Namespaces named ``<run>-<name>`` with addresses in a /24 chosen for this run, all on one
    bridge. ``run`` (by default from the process id) keeps concurrent runs apart."""

    def __init__(self, run: str | None = None) -> None:
        number = os.getpid() % 50000
        self.run = run or f"h{number}"
        self.bridge = f"{self.run}br"[:15]
        self.network = f"10.{100 + number // 250 % 150}.{number % 250}"
        self.addresses: dict[str, str] = {}
        self._cuts: dict[int, set[tuple[str, str]]] = {}
        """The cuts in force: (receiver, sender) pairs whose packets vanish."""
        self._next_cut = 0
        self._dropping: dict[str, set[str]] = {}
        """Per host, the hosts whose packets it drops now."""
        self._lock = threading.RLock()
        """Overlapping faults cut and heal from threads of their own: the rules a host holds are
        computed and installed by one at a time (two heals interleaved once left a host dropping
        everything from a cut that had ended, for good, since ``_dropping`` said otherwise)."""

    # -- setting up ---------------------------------------------------------------------------
    def __enter__(self) -> NetnsHosts:
        reason = unavailable()
        if reason is not None:
            raise HostsError(reason)
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "link", "set", self.bridge, "up"])
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def namespace(self, name: str) -> str:
        return f"{self.run}-{name}"

    def add(self, name: str) -> str:
        """A host named ``name``: its namespace, its address on the bridge (returned)."""
        with self._lock:
            return self._add_host(name)

    def _add_host(self, name: str) -> str:
        if name in self.addresses:
            return self.addresses[name]
        number = len(self.addresses) + 1
        if number > 250:
            raise HostsError("at most 250 hosts per run")
        address = f"{self.network}.{number}"
        namespace = self.namespace(name)
        veth = f"{self.run}v{number}"[:15]
        _run(["ip", "netns", "add", namespace])
        _run(
            ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace]
        )
        _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
        inside = ["ip", "netns", "exec", namespace]
        _run([*inside, "ip", "addr", "add", f"{address}/24", "dev", "eth0"])
        _run([*inside, "ip", "link", "set", "eth0", "up"])
        _run([*inside, "ip", "link", "set", "lo", "up"])
        self.addresses[name] = address
        self._write_hosts_files()
        return address

    def _write_hosts_files(self) -> None:
        lines = ["127.0.0.1 localhost"]
        lines += [f"{a} {n}.{DOMAIN} {n}" for n, a in sorted(self.addresses.items())]
        text = "\n".join(lines) + "\n"
        for name in self.addresses:
            directory = NETNS_ETC / self.namespace(name)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "hosts").write_text(text)

    def prefix(self, name: str) -> list[str]:
        """What runs a command on host ``name``."""
        return ["ip", "netns", "exec", self.namespace(name)]

    @staticmethod
    def hostname(name: str) -> str:
        return f"{name}.{DOMAIN}"

    # -- cuts ---------------------------------------------------------------------------------
    # Each cut is a set of (receiver, sender) pairs whose packets are dropped; several may hold
    # at once (overlapping faults), and each host drops the union of what they say.
    def partition(self, groups: Iterable[Iterable[str]]) -> int:
        """Two hosts reach each other only if some group holds both (a host in no group is cut
        off from every other one); the cut's number, for ``heal``."""
        sides = [set(group) for group in groups]
        pairs = set()
        with self._lock:
            for name in self.addresses:
                mine = [side for side in sides if name in side]
                reach = set().union(*mine) if mine else set()
                pairs |= {(name, other) for other in set(self.addresses) - reach - {name}}
            return self._add(pairs)

    def isolate(self, name: str) -> int:
        """``name`` reaches nobody and nobody reaches it."""
        with self._lock:
            others = set(self.addresses) - {name}
            return self._add({(name, o) for o in others} | {(o, name) for o in others})

    def cut_pair(self, first: str, second: str) -> int:
        return self._add({(first, second), (second, first)})

    def heal(self, cut: int | None = None) -> None:
        """The cut numbered ``cut`` ends (every cut, with None)."""
        with self._lock:
            if cut is None:
                self._cuts.clear()
            else:
                self._cuts.pop(cut, None)
            self._apply()

    def _add(self, pairs: set[tuple[str, str]]) -> int:
        with self._lock:
            self._next_cut += 1
            self._cuts[self._next_cut] = pairs
            self._apply()
            return self._next_cut

    def _apply(self) -> None:
        wanted: dict[str, set[str]] = {name: set() for name in self.addresses}
        for pairs in self._cuts.values():
            for receiver, sender in pairs:
                wanted[receiver].add(sender)
        for name, sources in wanted.items():
            self._drop(name, sources)

    def _drop(self, name: str, sources: set[str]) -> None:
        """Make host ``name`` drop what comes from ``sources`` (and only that)."""
        if self._dropping.get(name, set()) == sources:
            return
        inside = self.prefix(name)
        _run([*inside, "nft", "delete", "table", "inet", TABLE], check=False)
        if sources:
            addresses = ", ".join(self.addresses[s] for s in sorted(sources))
            script = (
                f"table inet {TABLE} {{\n"
                "  chain input { type filter hook input priority 0; policy accept;\n"
                f"    ip saddr {{ {addresses} }} drop\n  }}\n}}\n"
            )
            _run([*inside, "nft", "-f", "-"], stdin=script)
        self._dropping[name] = set(sources)

    def slow(self, name: str, seconds: float) -> None:
        """Every packet out of ``name`` waits ``seconds`` (0: no more)."""
        inside = self.prefix(name)
        _run([*inside, "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        if seconds > 0:
            delay = f"{round(seconds * 1000)}ms"
            _run([*inside, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", delay])

    # -- tearing down -------------------------------------------------------------------------
    def close(self) -> None:
        for name in list(self.addresses):
            namespace = self.namespace(name)
            _run(["ip", "netns", "del", namespace], check=False)  # its veth goes with it
            with contextlib.suppress(OSError):
                shutil.rmtree(NETNS_ETC / namespace)
        self.addresses.clear()
        _run(["ip", "link", "del", self.bridge], check=False)


def cleanup_stale(run: str) -> None:
    """What a killed run of ``run`` left behind."""
    for line in _run(["ip", "netns", "list"], check=False).splitlines():
        namespace = line.split()[0] if line.split() else ""
        if namespace.startswith(f"{run}-"):
            _run(["ip", "netns", "del", namespace], check=False)
            with contextlib.suppress(OSError):
                shutil.rmtree(NETNS_ETC / namespace)
    _run(["ip", "link", "del", f"{run}br"[:15]], check=False)
