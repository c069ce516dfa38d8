"""Networks built and torn down by the protocol itself, checked at every size.

Every check goes through ``Network.check`` (each node's own table, neighbours' positions and
addresses, and last ``TopologyChanged`` against the global snapshot) and ``assert_cube`` (the
issue's invariants). networkx computes the exact diameter for N <= 64 and every 8th N beyond; for
the other sizes the diameter bound follows from the tree depths checked from every root."""

import random

import pytest

from hypercup.testing import Network
from tests.hypercup.invariants import assert_cube, ceil_log2


def check(network: Network) -> None:
    topology = network.check()
    n = topology.size
    assert_cube(topology, roots=None if n <= 32 else 6, diameter=n <= 64 or n % 8 == 0)


def grown(seed: int, size: int, *, checked: bool = True) -> Network:
    """``size`` super-peers joined one by one through random members (in a random order)."""
    network = Network(seed=seed)
    names = [f"p{i:04}" for i in range(size)]
    random.Random(seed).shuffle(names)
    network.create(names[0])
    if checked:
        check(network)
    for name in names[1:]:
        network.join(name)
        if checked:
            check(network)
    return network


@pytest.mark.slow
@pytest.mark.parametrize("seed", [256, 4096])
def test_every_size_from_1_to_256_by_joins_then_back_by_leaves_and_failures(seed: int) -> None:
    network = grown(seed=seed, size=256)
    assert len(network.members) == 256
    choices = random.Random(seed + 1)
    while len(network.members) > 1:
        departing = choices.choice(network.members)
        if choices.random() < 0.5:
            network.leave(departing)
        else:
            network.fail(departing)
        check(network)


@pytest.mark.slow
def test_spot_checks_at_512_and_1024() -> None:
    network = grown(seed=1024, size=512, checked=False)
    check(network)
    for i in range(512, 1024):
        network.join(f"q{i:04}")
    topology = network.check()
    assert topology.size == 1024 and topology.dimension == 10
    assert_cube(topology, roots=4, diameter=False)
    choices = random.Random(1025)
    for _ in range(40):
        departing = choices.choice(network.members)
        (network.leave if choices.random() < 0.5 else network.fail)(departing)
    topology = network.check()
    assert topology.size == 984
    assert_cube(topology, roots=4, diameter=False)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 12, 16, 17])
@pytest.mark.parametrize("failure", [False, True])
def test_any_single_member_can_depart(n: int, failure: bool) -> None:
    """Every member in turn (holder of position 0, the anchor, a doubled node, a newcomer...)
    departs from the same network; shrinking sizes (8, 16) exercise the shrink."""
    for index in range(n):
        network = grown(seed=n, size=n, checked=False)
        departing = network.members[index]
        (network.fail if failure else network.leave)(departing)
        assert departing not in network.members
        check(network)


def test_the_last_member_can_leave() -> None:
    network = grown(seed=1, size=1)
    (only,) = network.members
    assert network.leave(only).messages == 0
    assert network.members == []


def costs(network: Network, operation, argument: str) -> tuple[int, dict[str, int]]:
    stats = operation(argument)
    return stats.messages, dict(stats.kinds)


def test_joins_and_leaves_cost_O_log_N_and_a_grow_or_shrink_N_minus_1() -> None:
    network = grown(seed=7, size=1, checked=False)
    for i in range(1, 200):
        n = len(network.members)
        messages, kinds = costs(network, network.join, f"j{i}")
        grow = kinds.pop("hypercup.grow", 0)
        assert grow in (0, n - 1)
        assert grow == (n - 1 if n & (n - 1) == 0 and n > 1 else 0)
        # the census before a grow: down the tree and back, N - 1 messages each way
        assert kinds.pop("hypercup.census", 0) == grow
        assert kinds.pop("hypercup.census_reply", 0) == grow
        grow *= 3
        d = ceil_log2(n + 1)
        assert messages - grow <= 6 * d + 3
    choices = random.Random(8)
    while len(network.members) > 1:
        n = len(network.members)
        departing = choices.choice(network.members)
        messages, kinds = costs(network, network.leave, departing)
        shrink = kinds.pop("hypercup.shrink", 0)
        assert shrink <= n - 1
        assert messages - shrink <= 8 * ceil_log2(n) + 4


def test_the_same_seed_gives_the_same_run() -> None:
    def run(seed: int) -> list[int]:
        network = Network(seed=seed)
        network.create("a")
        counts = [network.join(f"n{i}").messages for i in range(40)]
        counts += [network.join_concurrently([f"m{i}" for i in range(9)]).messages]
        counts += [network.fail(network.members[3]).messages, network.leave("n7").messages]
        return counts

    assert run(5) == run(5)
