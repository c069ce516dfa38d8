"""``SubscriptionPoset.insert_many`` against its oracle, ``insert`` called on each item in turn: the
same nodes (ids, subscriptions, sources, sent marks), the same Hasse diagram, the same reports."""

import gc
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset.generality import generality_key
from poset.poset import Inserted, PosetNode, SubscriptionPoset
from tests.poset.test_poset import check_invariants
from tests.strategies import subscriptions
from workloads.listings import Listings

P = "@prefix ex: <http://example.org/> .\n"


def q(text: str) -> qel.Subscription:
    return qel.parse_subscription(P + text)


# Equivalent with different keys (two ways of saying "any number"), so that one-at-a-time insertion
# merges the second into the first's node: bulk insertion must number and represent it the same.
ANY_NUMBER_SPLIT_AT_1 = q("X : t(X, ex:issued, V), (V < 1 ; V >= 1)")
ANY_NUMBER_SPLIT_AT_0 = q("X : t(X, ex:issued, V), (V <= 0 ; V > 0)")
TRICKY = [ANY_NUMBER_SPLIT_AT_1, ANY_NUMBER_SPLIT_AT_0, q("X : t(X, ex:issued, V), V > 0")]

items = st.lists(
    st.tuples(
        st.one_of(subscriptions(max_patterns=2), st.sampled_from(TRICKY)), st.sampled_from("abc")
    ),
    max_size=14,
)


def shape(poset: SubscriptionPoset) -> list[tuple]:
    return [
        (
            node.id,
            node.subscription.key,
            node.sources,
            node.sent,
            sorted(node.parents),
            sorted(node.children),
        )
        for node in poset
    ] + [("roots", [n.id for n in poset.roots()])]


def report(inserted: Inserted) -> tuple:
    return inserted.node.id, inserted.created, dict(inserted.already_sent)


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
    expected = [report(one.insert(*triple)) for triple in triples]
    assert [report(inserted) for inserted in many.insert_many(triples)] == expected
    assert shape(many) == shape(one)
    check_invariants(many)
    sentinel = q("X : t(X, ex:sentinel, V)")
    assert many.insert(sentinel, "z", "z").node.id == one.insert(sentinel, "z", "z").node.id


def test_insert_many_numbers_and_represents_equivalent_subscriptions_as_insert_does():
    # The generality order places the second before the first: bulk insertion must still give
    # the node the first one's id and subscription, and the next node the next id.
    batch = [
        (ANY_NUMBER_SPLIT_AT_1, "a", "1"),
        (ANY_NUMBER_SPLIT_AT_0, "b", "1"),
        (q("X : t(X, ex:issued, V), V > 0"), "c", "1"),
    ]
    one = SubscriptionPoset()
    expected = [report(one.insert(*triple)) for triple in batch]
    many = SubscriptionPoset()
    assert [report(inserted) for inserted in many.insert_many(batch)] == expected
    assert shape(many) == shape(one)
    assert many.node(1).subscription is ANY_NUMBER_SPLIT_AT_1


def test_insert_many_renumbers_the_children_of_a_node_with_many_of_them():
    # The equivalent pair leaves a gap in the placement ids, so the children are renumbered
    # while held in their parent's dictionary of edges (more than ``poset.edges.FEW``).
    children = [(q(f"X : t(X, ex:issued, V), V = {n}"), "c", str(n)) for n in range(40)]
    batch = [(ANY_NUMBER_SPLIT_AT_1, "a", "1"), (ANY_NUMBER_SPLIT_AT_0, "b", "1"), *children]
    one, many = SubscriptionPoset(), SubscriptionPoset()
    for triple in batch:
        one.insert(*triple)
    many.insert_many(batch)
    assert shape(many) == shape(one)
    parent = many.node(1)
    assert type(parent.child_nodes) is dict
    assert all(child in parent.child_nodes for child in list(parent.child_nodes))  # by new id
    for _, source, subscription_id in children:
        many.remove(source, subscription_id)
    check_invariants(many)
    assert [node.id for node in many] == [1]


def test_insert_many_checks_the_whole_batch_before_changing_anything():
    poset = SubscriptionPoset()
    poset.insert(q("X : t(X, ex:issued, V)"), "a", "1")
    before = shape(poset)
    with pytest.raises(ValueError, match="already uses the id '2'"):
        poset.insert_many(
            [
                (q("X : t(X, ex:title, T)"), "a", "2"),
                (q("X : t(X, ex:subject, S)"), "a", "2"),
            ]
        )
    assert shape(poset) == before


@settings(max_examples=200)
@given(subscriptions(max_patterns=2), subscriptions(max_patterns=2))
def test_generality_order_never_puts_a_subscription_after_one_it_covers_in_its_family(
    first, second
):
    # Within a family (same predicates and values, ranges aside) the order extends covering;
    # across families it only guarantees fewer predicates first.
    general_key, specific_key = generality_key(first), generality_key(second)
    if qel.covers(first, second) and not qel.covers(second, first):
        assert general_key[0] <= specific_key[0]
        if general_key[:2] == specific_key[:2] and len(first.filters) == 1:
            assert general_key <= specific_key


def test_removed_nodes_are_freed_by_reference_counting_alone():
    """A super-peer freezes what it holds (``superpeer.collector``): the cyclic collector never
    looks at it again, so a node removed later must form no cycle, or it would stay for good."""
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
        for root in poset.roots():
            poset.mark_sent(root, "north", {"origin"})
        del root  # the loop's variable holds a node
        held = sum(isinstance(o, PosetNode) for o in gc.get_objects()) - before
        for _, source, subscription_id in random.Random(1).sample(items, len(items)):
            poset.remove(source, subscription_id)
        left = sum(isinstance(o, PosetNode) for o in gc.get_objects()) - before
    finally:
        if collecting:
            gc.enable()
    assert held > 500 and left == 0
