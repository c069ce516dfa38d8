"""``deploy.hosts``: every host reaches every other one by name, and cuts (partitions with or
without a bridge, a host isolated, a pair cut) hold together and heal one by one. Needs root,
``ip`` and ``nft`` (skipped otherwise, with the reason)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from deploy.hosts import NetnsHosts, slow_unavailable, unavailable

REASON = unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=str(REASON))]
PORT = 8765
NAMES = ("a", "b", "c", "d")
_RUNS = itertools.count(1)


def run_name(kind: str) -> str:
    """A name no other set of hosts has had in this process or beside it: the kernel deletes a
    namespace's links after the namespace is gone, asynchronously, so the next test's link of
    the same name could find the last one still there ("File exists": once in CI, when the
    name came from ``id(object())``, the same in every test and in both workers)."""
    return f"{kind}{os.getpid() % 10000}n{next(_RUNS)}"


@pytest.fixture
def hosts() -> Iterator[NetnsHosts]:
    """Four hosts, each listening on ``PORT``."""
    with NetnsHosts(run_name("t")) as made:
        servers = []
        try:
            for name in NAMES:
                made.add(name)
            for name in NAMES:
                server = [sys.executable, "-m", "http.server", str(PORT), "--bind", "0.0.0.0"]
                servers.append(
                    subprocess.Popen(
                        [*made.prefix(name), *server],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            for name in NAMES:  # listening, before any cut
                for other in NAMES:
                    assert wait_reaches(made, name, other), f"{name} cannot reach {other}"
            yield made
        finally:
            for server in servers:
                server.kill()
                server.wait()


def reaches(hosts: NetnsHosts, source: str, target: str) -> bool:
    """Whether a TCP connection from ``source`` to ``target`` (by host name) opens within 1 s."""
    connect = (
        "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)"
    )
    done = subprocess.run(
        [*hosts.prefix(source), sys.executable, "-c", connect, hosts.hostname(target), str(PORT)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def wait_reaches(hosts: NetnsHosts, source: str, target: str, tries: int = 50) -> bool:
    return any(reaches(hosts, source, target) for _ in range(tries))


def reachable(hosts: NetnsHosts) -> set[tuple[str, str]]:
    return {(s, t) for s in NAMES for t in NAMES if s != t and reaches(hosts, s, t)}


EVERY = {(s, t) for s in NAMES for t in NAMES if s != t}


def test_a_partition_with_a_bridge_and_an_isolated_host_hold_together_and_heal_apart(hosts):
    bridged = hosts.partition([["a", "b"], ["b", "c", "d"]])
    assert reachable(hosts) == EVERY - {("a", "c"), ("c", "a"), ("a", "d"), ("d", "a")}
    alone = hosts.isolate("d")
    assert reachable(hosts) == {("a", "b"), ("b", "a"), ("b", "c"), ("c", "b")}
    hosts.heal(bridged)
    assert reachable(hosts) == {p for p in EVERY if "d" not in p}
    hosts.heal(alone)
    assert reachable(hosts) == EVERY


def test_a_pair_cut_and_a_host_in_no_group(hosts):
    pair = hosts.cut_pair("a", "b")
    assert reachable(hosts) == EVERY - {("a", "b"), ("b", "a")}
    hosts.heal(pair)
    hosts.partition([["a", "b", "c"]])  # d is in no group: cut off from everyone
    assert reachable(hosts) == {p for p in EVERY if "d" not in p}
    hosts.heal()
    assert reachable(hosts) == EVERY


def test_slow_delays_packets_or_a_run_that_asks_for_it_says_why_it_cannot():
    # some kernels (containers, microVMs) have no netem: ``slow`` is then left out of the
    # default kinds, and asked for by name it is refused before anything starts
    why = slow_unavailable()
    if why is None:
        with NetnsHosts(run_name("s")) as made:
            made.add("a")
            made.slow("a", 0.2)
            shown = subprocess.run(
                [*made.prefix("a"), "tc", "qdisc", "show", "dev", "eth0"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert "netem" in shown and "200ms" in shown, shown
            made.slow("a", 0)
        return
    assert "netem" in why
    command = [sys.executable, "-m", "deploy.chaos", "--hosts", "netns", "--faults", "slow"]
    refused = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "slow on --hosts netns" in refused.stderr and "netem" in refused.stderr


def rules_left(hosts: NetnsHosts) -> dict[str, str]:
    """The cut rules each host holds now, as nftables lists them (none: not listed)."""
    held = {}
    for name in NAMES:
        listed = subprocess.run(
            [*hosts.prefix(name), "nft", "list", "ruleset"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if "drop" in listed:
            held[name] = listed
    return held


def test_cuts_and_heals_from_threads_at_once_leave_no_rule_behind(hosts):
    """Overlapping faults cut and heal from threads of their own. Interleaved, two heals once
    left a host dropping everything from a cut that had ended: a super-peer stayed cut off from
    the rest for the rest of a chaos run."""
    shapes = [
        [["a", "b"], ["c", "d"]],
        [["a"], ["b", "c", "d"]],
        [["a", "b", "c"], ["c", "d"]],
        [["a", "d"], ["b", "c"]],
    ]

    def cut_and_heal(turn: int) -> None:
        for round_ in range(6):
            shape = shapes[(turn + round_) % len(shapes)]
            cut = hosts.isolate(NAMES[turn]) if round_ % 3 == 2 else hosts.partition(shape)
            hosts.heal(cut)

    threads = [threading.Thread(target=cut_and_heal, args=(turn,)) for turn in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert rules_left(hosts) == {}
    assert reachable(hosts) == EVERY
