"""The poset on the shapes workload (every shape of the language, ``workloads.shapes``): its
Hasse diagram and its matching agree with ``qel.covers`` and ``qel.matches`` through insertions,
a bulk insertion and removals, on small seeded samples."""

import random

import pytest

import qel
from poset.poset import SubscriptionPoset
from tests.poset.test_poset import check_invariants
from workloads.shapes import Shapes


def _brute(items: list[tuple[qel.Subscription, str, str]], publication: qel.Publication):
    found: dict[str, set[str]] = {}
    for subscription, source, subscription_id in items:
        if qel.matches(subscription, publication):
            found.setdefault(source, set()).add(subscription_id)
    return found


@pytest.mark.parametrize("seed", [1, 2])
def test_shapes_poset_agrees_with_brute_force(seed):
    shapes = Shapes(seed=seed)
    items = [
        (qel.parse_subscription(shapes.subscription()), f"peer{n % 7}", str(n)) for n in range(160)
    ]
    publications = [
        qel.parse_publications(shapes.turtle(shapes.vehicle(n)), id=str(n))[0] for n in range(10)
    ]
    one_at_a_time = SubscriptionPoset()
    for item in items[:100]:
        one_at_a_time.insert(*item)
    one_at_a_time.insert_many(items[100:])
    bulk = SubscriptionPoset()
    bulk.insert_many(items)
    edges = [{(n.id, c) for n in poset for c in n.children} for poset in (one_at_a_time, bulk)]
    assert edges[0] == edges[1]
    check_invariants(one_at_a_time)
    for publication in publications:
        assert one_at_a_time.match(publication) == _brute(items, publication)
    gone = random.Random(seed).sample(items, 60)
    for _, source, subscription_id in gone:
        one_at_a_time.remove(source, subscription_id)
    left = [item for item in items if item not in gone]
    check_invariants(one_at_a_time)
    for publication in publications:
        assert one_at_a_time.match(publication) == _brute(left, publication)
