"""Posets in one process are independent: the covering tests one does to place a burst do not
depend on other posets alive beside it, although they share the module-level caches (families,
their projections and the bound on those kept, interned predicates and range parts, recent
witnesses).

Why it matters: the simulator's nodes, and a test worker's modules, share one process. A burst
there once took four times the covering tests of the same burst alone; the cause was time, not
work (the garbage collector's full passes over every object alive in the process, charged to
whichever node's call they fell in, made a call long, a neighbour declared the node failed,
and the hand-over was placed again). This pins the work: counted, not timed."""

import itertools

import qel
from poset import families
from poset import poset as poset_module
from poset.poset import SubscriptionPoset
from workloads.digital_library import DigitalLibrary
from workloads.shapes import Shapes


def _items(workload, count: int, prefix: str) -> list[tuple[qel.Subscription, str, str]]:
    return [
        (qel.parse_subscription(workload.subscription()), f"{prefix}{n % 9}", str(n))
        for n in range(count)
    ]


def _tests_to_place(items, monkeypatch, beside=None, others=()) -> tuple[int, set]:
    """Covering tests a fresh poset does to place ``items`` one at a time (then to remove a
    third of them), and its Hasse diagram; ``beside``, another poset, is given one of
    ``others`` after each (its tests not counted)."""
    done = [0]
    counting = [False]
    real = poset_module._covers_signed

    def counted(general, specific) -> bool:
        done[0] += counting[0]
        return real(general, specific)

    more = iter(others)
    with monkeypatch.context() as patched:
        patched.setattr(poset_module, "_covers_signed", counted)
        poset = SubscriptionPoset()
        for item in items:
            counting[0] = True
            poset.insert(*item)
            counting[0] = False
            for other in itertools.islice(more, 1):
                beside.insert(*other)
        counting[0] = True
        for _, source, subscription_id in items[::3]:
            poset.remove(source, subscription_id)
    return done[0], {(node.id, child) for node in poset for child in node.children}


def test_a_burst_takes_the_same_covering_tests_with_another_poset_alive(monkeypatch):
    # few projections kept, so that the other poset's placements make every family forget
    # its own several times during the burst (the bound is shared by all families)
    monkeypatch.setattr(families, "PROJECTIONS_KEPT", 64)
    burst = _items(DigitalLibrary(seed=3), 150, "reader") + _items(Shapes(seed=3), 150, "car")
    alone = _tests_to_place(burst, monkeypatch)
    other = SubscriptionPoset()  # the same shapes and families, drawn again, and others
    other.insert_many(_items(Shapes(seed=4), 300, "other") + _items(Shapes(seed=3), 150, "x"))
    beside = _tests_to_place(burst, monkeypatch, other, _items(Shapes(seed=5), 300, "more"))
    assert len(other) > 600
    assert alone[0] > 400, "too few tests to show anything"
    assert beside == alone
