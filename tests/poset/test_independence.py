"""Posets in one process are independent: the covering tests one does to place, send and remove a
burst, and what it answers, do not depend on other posets alive beside it, although they share
module-level caches (the recent witnesses, interned predicates and witness strings).

Why it matters: the simulator's nodes, and a test worker's modules, share one process. A burst
there once took four times the covering tests of the same burst alone; the cause was time, not
work (the garbage collector's full passes over every object alive in the process, charged to
whichever node's call they fell in, made a call long, a neighbour declared the node failed,
and the hand-over was placed again). This pins the work: counted, not timed."""

import itertools

import qel
from poset import poset as poset_module
from poset.poset import SubscriptionPoset
from workloads.digital_library import DigitalLibrary
from workloads.shapes import Shapes


def _items(workload, count: int, prefix: str) -> list[tuple[qel.Subscription, str, str]]:
    return [
        (qel.parse_subscription(workload.subscription()), f"{prefix}{n % 9}", str(n))
        for n in range(count)
    ]


def _burst(items, monkeypatch, beside=None, others=()) -> tuple[int, list]:
    """Covering tests (the predicates compared, the filters compared) a fresh poset does to place ``items`` one at a time (each sent to a
    destination for its source's label, unless something covering it was), then to remove a third of them (resending
    what each asks), and what it answered; ``beside``, another poset, is given one of
    ``others`` after each (its tests not counted)."""
    done = [0]
    counting = [False]
    real, real_compiled = poset_module.covers, poset_module._covers_compiled

    def counted(general, specific, compiled=None) -> bool:
        done[0] += counting[0]
        return real(general, specific, compiled)

    def counted_compiled(general, specific, compiled) -> bool:
        done[0] += counting[0]
        return real_compiled(general, specific, compiled)

    answers: list = []
    more = iter(others)
    with monkeypatch.context() as patched:
        patched.setattr(poset_module, "covers", counted)
        patched.setattr(poset_module, "_covers_compiled", counted_compiled)
        poset = SubscriptionPoset()
        for number, item in enumerate(items):
            counting[0] = True
            inserted = poset.insert(*item)
            destination = f"sp{number % 3}"
            missing = poset.missing(inserted.node, {destination: {item[1]}})
            if missing:
                poset.mark_sent(inserted.node, destination, missing[destination])
            counting[0] = False
            answers.append((inserted.node.id, missing))
            for other in itertools.islice(more, 1):
                node = beside.insert(*other).node
                beside.mark_sent(node, f"sp{node.id % 3}", {"x"})
        counting[0] = True
        for _, source, subscription_id in items[::3]:
            removed = poset.remove(source, subscription_id)
            resend = {
                d: [(n.id, set(labels)) for n, labels in entries]
                for d, entries in removed.resend.items()
            }
            answers.append((removed.node.id, removed.deleted, resend))
            for destination, entries in removed.resend.items():
                for node, labels in entries:
                    poset.mark_sent(node, destination, labels)
    return done[0], answers


def test_a_burst_takes_the_same_covering_tests_with_another_poset_alive(monkeypatch):
    burst = _items(DigitalLibrary(seed=3), 150, "reader") + _items(Shapes(seed=3), 150, "car")
    alone = _burst(burst, monkeypatch)
    other = SubscriptionPoset()  # the same shapes drawn again, and others
    other.insert_many(_items(Shapes(seed=4), 300, "other") + _items(Shapes(seed=3), 150, "x"))
    for node in other.general_first()[:50]:
        other.mark_sent(node, "sp0", {"x"})
    beside = _burst(burst, monkeypatch, other, _items(Shapes(seed=5), 300, "more"))
    assert len(other) > 600
    assert alone[0] > 15, "too few tests to show anything"  # a removal tests only stand-ins
    assert any(len(answer) == 3 and answer[2] for answer in alone[1]), "nothing resent"
    assert beside == alone
