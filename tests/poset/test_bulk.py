"""``SubscriptionPoset.insert_many`` against its oracle, ``insert`` called on each item in turn: the
same nodes (ids, subscriptions, sources, sent marks), the same reports; a batch reusing a
(source, id) for another subscription changes nothing. And a removed node is freed by reference
counting alone."""

import gc
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset.poset import Inserted, PosetNode, SubscriptionPoset
from tests.poset.oracle import ask_missing, check_invariants, equivalents, q, subscription_lists
from workloads.listings import Listings

# Equivalent with different filters (two ways of saying "any number"): separate nodes.
ANY_NUMBER_SPLIT_AT_1 = q("X : t(X, ex:issued, V), (V < 1 ; V >= 1)")
ANY_NUMBER_SPLIT_AT_0 = q("X : t(X, ex:issued, V), (V <= 0 ; V > 0)")


def shape(poset: SubscriptionPoset) -> list[tuple]:
    return [
        (node.id, node.subscription.filters, node.sources, node.sent)
        for node in poset.general_first()
    ]


def report(poset: SubscriptionPoset, inserted: Inserted) -> tuple:
    return inserted.node.id, inserted.created, poset.missing(inserted.node, {"north": {"o1", "o2"}})


items = st.lists(
    st.tuples(
        st.one_of(subscription_lists(max_size=3), st.lists(equivalents, max_size=3)),
        st.sampled_from("abc"),
    ),
    max_size=5,
).map(lambda groups: [(s, source) for drawn, source in groups for s in drawn])
"""Runs of subscriptions of one kind (dense in covering) from one source at a time."""


@settings(max_examples=80, deadline=None)
@given(items, items, st.data())
def test_insert_many_builds_what_one_at_a_time_insertion_builds(before, batch, data):
    one, many = SubscriptionPoset(), SubscriptionPoset()
    for poset in (one, many):
        for number, (subscription, source) in enumerate(before):
            poset.insert(subscription, source, f"old{number}")
    for node_id in data.draw(st.lists(st.sampled_from([n.id for n in one] or [0]), max_size=3)):
        if len(one):
            for poset in (one, many):
                poset.mark_sent(poset.node(node_id), "north", {"o1"})
    triples = [(s, source, str(number)) for number, (s, source) in enumerate(batch)]
    if triples:  # the same item again changes nothing and reports the node as existing
        triples.append(triples[data.draw(st.integers(0, len(triples) - 1))])
    if before and data.draw(st.booleans()):  # an item already in the poset, before the batch
        triples.insert(0, (before[0][0], before[0][1], "old0"))
    expected = [report(one, one.insert(*triple)) for triple in triples]
    assert [report(many, inserted) for inserted in many.insert_many(iter(triples))] == expected
    assert shape(many) == shape(one)
    check_invariants(many)
    sentinel = q("X : t(X, ex:sentinel, V)")
    assert many.insert(sentinel, "z", "z").node.id == one.insert(sentinel, "z", "z").node.id


def test_insert_many_numbers_equivalent_subscriptions_written_apart_as_insert_does():
    batch = [
        (ANY_NUMBER_SPLIT_AT_1, "a", "1"),
        (ANY_NUMBER_SPLIT_AT_0, "b", "1"),
        (q("X : t(X, ex:issued, V), V > 0"), "c", "1"),
        (ANY_NUMBER_SPLIT_AT_0, "a", "1"),  # the same id, an equivalent subscription: no change
    ]
    one = SubscriptionPoset()
    expected = [report(one, one.insert(*triple)) for triple in batch]
    north = {"north": {"o1", "o2"}}
    assert expected == [(1, True, north), (2, True, north), (3, True, north), (1, False, north)]
    many = SubscriptionPoset()
    assert [report(many, inserted) for inserted in many.insert_many(batch)] == expected
    assert shape(many) == shape(one)
    assert many.node(1).subscription is ANY_NUMBER_SPLIT_AT_1


@pytest.mark.parametrize("held", [False, True])
def test_insert_many_checks_the_whole_batch_before_changing_anything(held):
    """Whether the id is reused within the batch or was used before it."""
    poset = SubscriptionPoset()
    node = poset.insert(q("X : t(X, ex:issued, V)"), "a", "1").node
    poset.mark_sent(node, "north", {"o"})
    if held:
        poset.insert(q("X : t(X, ex:title, T)"), "a", "2")
    before = shape(poset)
    with pytest.raises(ValueError, match="a already uses the id '2' for another subscription"):
        poset.insert_many(
            [
                (q("X : t(X, ex:title, T)"), "a", "2"),
                (q("X : t(X, ex:creator, C)"), "b", "1"),
                (q("X : t(X, ex:subject, S)"), "a", "2"),
            ]
        )
    assert shape(poset) == before
    check_invariants(poset)
    assert poset.insert(q("X : t(X, ex:sentinel, V)"), "z", "z").node.id == 2 + held


@settings(max_examples=80, deadline=None)
@given(items, items, st.data())
def test_a_batch_reusing_an_id_for_another_subscription_raises_and_changes_nothing(
    before, batch, data
):
    """Some item of the batch takes the (source, id) of an earlier item or of a subscription
    held before, for a subscription that is not equivalent: ``ValueError``, and the poset is as
    it was (its nodes, their sources and sends, the next id)."""
    poset = SubscriptionPoset()
    for number, (subscription, source) in enumerate(before):
        node = poset.insert(subscription, source, str(number)).node
        if data.draw(st.booleans()):
            poset.mark_sent(node, "north", {"o1"})
    triples = [(s, source, str(len(before) + n)) for n, (s, source) in enumerate(batch)]
    taken = [(s, source, str(n)) for n, (s, source) in enumerate(before)] + triples
    if not taken:
        return
    subscription, source, used = data.draw(st.sampled_from(taken))
    other = data.draw(st.sampled_from(taken))[0]
    if qel.covers(subscription, other) and qel.covers(other, subscription):
        return  # an equivalent subscription under the same id is no conflict
    triples.insert(
        data.draw(st.integers(0, len(triples))), (other, source, used)
    )  # before or after
    before_shape = shape(poset)
    with pytest.raises(ValueError, match=f"{source} already uses the id '{used}'"):
        poset.insert_many(triples)
    assert shape(poset) == before_shape
    fresh = SubscriptionPoset()
    for number, (s, src) in enumerate(before):
        fresh.insert(s, src, str(number))
    sentinel = q("X : t(X, ex:sentinel, V)")
    assert poset.insert(sentinel, "z", "z").node.id == fresh.insert(sentinel, "z", "z").node.id


def test_removed_nodes_are_freed_by_reference_counting_alone():
    """A super-peer freezes what it holds (``superpeer.collector``): the cyclic collector never
    looks at it again, so a node removed later must form no cycle, or it would stay for good
    (sent ones included: the sent index and the plans of their removals hold them too)."""
    listings = Listings(seed=1)
    items = [
        (qel.parse_subscription(listings.subscription()), f"peer{n % 7}", str(n))
        for n in range(600)
    ]
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        before = sum(isinstance(o, PosetNode) for o in gc.get_objects())
        poset = SubscriptionPoset()
        poset.insert_many(items[:400])
        for item in items[400:]:
            poset.insert(*item)
        for node in poset.general_first()[:40]:
            poset.mark_sent(node, "north", {"origin"})
        del node  # the loop's variable holds a node
        ask_missing(poset, ("north",), ("origin",))
        held = sum(isinstance(o, PosetNode) for o in gc.get_objects()) - before
        for _, source, subscription_id in random.Random(1).sample(items, len(items)):
            removed = poset.remove(source, subscription_id)
            for destination, entries in removed.resend.items():
                for entry, labels in entries:
                    poset.mark_sent(entry, destination, labels)
        del removed, entries, entry
        left = sum(isinstance(o, PosetNode) for o in gc.get_objects()) - before
    finally:
        if collecting:
            gc.enable()
    assert held > 500 and left == 0
