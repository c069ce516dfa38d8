"""Random sequences of joins (one at a time or concurrent), leaves and failures, in random
interleavings of the links: after every operation the cube has its shape and every invariant."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hypercup import HypercupNode
from hypercup.testing import Network
from tests.hypercup.invariants import assert_cube

operations = st.lists(
    st.one_of(
        st.tuples(st.just("join"), st.integers(0, 10**6)),
        st.tuples(st.just("together"), st.integers(2, 9)),
        st.tuples(st.just("leave"), st.integers(0, 10**6)),
        st.tuples(st.just("fail"), st.integers(0, 10**6)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), start=st.integers(1, 20), steps=operations)
def test_random_joins_leaves_and_failures_keep_the_cube(seed: int, start: int, steps) -> None:
    network = Network(seed=seed)
    network.create("n0")
    names = iter(f"n{i}" for i in range(1, 10**6))
    for _ in range(start - 1):
        network.join(next(names))
    for kind, argument in steps:
        members = network.members
        if kind == "join":
            network.join(next(names), members[argument % len(members)])
        elif kind == "together":
            network.join_concurrently([next(names) for _ in range(argument)])
        elif len(members) > 1:
            departing = members[argument % len(members)]
            (network.leave if kind == "leave" else network.fail)(departing)
        assert_cube(network.check())


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    start=st.integers(1, 40),
    batch=st.integers(2, 40),
    one_contact=st.booleans(),
)
def test_concurrent_joins_through_any_contacts(
    seed: int, start: int, batch: int, one_contact: bool
) -> None:
    """Several newcomers at once, through one contact or random ones, often across a grow."""
    network = Network(seed=seed)
    network.create("n0")
    for i in range(1, start):
        network.join(f"n{i}")
    newcomers = [f"m{i}" for i in range(batch)]
    contacts = [network.members[seed % start]] * batch if one_contact else None
    network.join_concurrently(newcomers, contacts)
    topology = network.check()
    assert topology.size == start + batch
    assert_cube(topology, roots=8)


def test_contended_joins_retry_from_the_anchor(monkeypatch) -> None:
    retries = []
    original = HypercupNode._retry

    def counting(self: HypercupNode, walk) -> None:
        retries.append(walk.newcomer)
        original(self, walk)

    monkeypatch.setattr(HypercupNode, "_retry", counting)
    network = Network(seed=11)
    network.create("n0")
    for i in range(1, 20):
        network.join(f"n{i}")
    network.join_concurrently([f"m{i}" for i in range(40)])
    assert retries
    assert_cube(network.check(), roots=8)
