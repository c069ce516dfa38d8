"""The poset on the workloads (the shapes, every shape of the language, ``workloads.shapes``; the
listings; the digital library): its answers and its matching agree with ``qel.covers`` and
``qel.matches`` through insertions, a bulk insertion, sends and removals (each resending what
the oracle says), on small seeded samples."""

import random

import pytest

import qel
from poset.poset import SubscriptionPoset
from tests.poset.oracle import Brute, ask_missing, check_invariants, check_resend, match
from workloads.digital_library import DigitalLibrary
from workloads.listings import Listings
from workloads.shapes import Shapes


def _publication(workload, number: int) -> str:
    if isinstance(workload, Shapes):
        return workload.turtle(workload.vehicle(number))
    if isinstance(workload, Listings):
        return workload.turtle(workload.listing(number))
    return workload.turtle(workload.document(number))


_WORKLOADS = {
    "shapes-1": lambda: Shapes(seed=1, broad=0.2),
    "shapes-2": lambda: Shapes(seed=2, broad=0.2),
    "listings": lambda: Listings(seed=1),
    "library": lambda: DigitalLibrary(seed=1),
}


@pytest.mark.parametrize("name", sorted(_WORKLOADS))
def test_workload_posets_agree_with_brute_force(name):
    workload = _WORKLOADS[name]()
    items = [
        (qel.parse_subscription(workload.subscription()), f"peer{n % 7}", str(n))
        for n in range(300)
    ]
    publications = [
        qel.parse_publications(_publication(workload, n), id=str(n))[0] for n in range(10)
    ]
    seed = workload.seed
    one_at_a_time = SubscriptionPoset()
    for item in items[:100]:
        one_at_a_time.insert(*item)
    one_at_a_time.insert_many(items[100:])
    bulk = SubscriptionPoset()
    bulk.insert_many(items)
    shape = [
        [(n.id, n.subscription.filters, n.sources) for n in poset]
        for poset in (one_at_a_time, bulk)
    ]
    assert shape[0] == shape[1]
    live = {(source, sid): subscription for subscription, source, sid in items}
    draw = random.Random(seed)
    for node in one_at_a_time.general_first()[:40]:
        one_at_a_time.mark_sent(node, draw.choice(["north", "south"]), {draw.choice("xy")})
    ask_missing(one_at_a_time, ("north", "south"), "xy")
    brute = Brute(one_at_a_time)
    check_invariants(one_at_a_time, live, brute)
    for publication in publications:
        assert one_at_a_time.match(publication) == match(live, publication)
    resent = 0
    for _, source, subscription_id in draw.sample(items, 120):
        node = one_at_a_time.node_of(source, subscription_id)
        below = brute.covered_by(node)
        sent = {d: set(held) for d, held in node.sent.items()}
        removed = one_at_a_time.remove(source, subscription_id)
        del live[source, subscription_id]
        if removed.deleted:
            check_resend(brute, node, below, sent, removed.resend)
            resent += sum(map(len, removed.resend.values()))
        for destination, entries in removed.resend.items():
            for entry, labels in entries:
                one_at_a_time.mark_sent(entry, destination, labels)
    assert resent, "no removal resent anything"
    check_invariants(one_at_a_time, live, brute)
    for publication in publications:
        assert one_at_a_time.match(publication) == match(live, publication)
