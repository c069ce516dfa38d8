"""What was sent for a subscription or one covering it, against brute force (the union of what
every node whose subscription covers it, itself included, was sent): ``sent_labels`` per
destination, and ``missing``, what a router must still send it for (what it wants less that),
asked of a subscription as it comes and of every node through sends, unsends and removals."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from poset.poset import SubscriptionPoset
from tests.poset.oracle import (
    DESTINATIONS,
    LABELS,
    Brute,
    check_sent,
    grow,
    grown,
    labels,
    step,
    subscription_lists,
)

_wanted = st.dictionaries(st.sampled_from(DESTINATIONS), st.sets(st.sampled_from(LABELS)))
"""What a router asks ``missing`` with: some destinations, each for some labels (or none)."""


@settings(max_examples=200, deadline=None)
@given(subscription_lists(min_size=2, max_size=16), st.data())
def test_what_is_missing_for_a_new_subscription_is_what_its_coverers_were_not_sent(entries, data):
    """Subscriptions of one kind placed, some sent, then the others inserted one at a time (a
    removal, a send or an unsend between them): for each, what the oracle says was sent above
    it, whether a node of its filters was there already or not."""
    split = data.draw(st.integers(1, len(entries) - 1))
    placed, later = entries[:split], entries[split:]
    poset = SubscriptionPoset()
    live = grow(data, poset, placed)
    brute = Brute(poset)
    for number, subscription in enumerate(later):
        held = next((n for n in poset if n.subscription.filters == subscription.filters), None)
        inserted = poset.insert(subscription, "late", str(number))
        live["late", str(number)] = subscription
        assert inserted.created == (held is None)
        assert held is None or inserted.node is held
        event(f"sent above: {min(len(brute.sent_above(inserted.node)), 2)}")
        check_sent(poset, brute, inserted.node, data.draw(_wanted))
        if data.draw(st.booleans()):
            step(data, poset, live, data.draw(st.sampled_from(["send", "unsend", "remove"])))
    for node in poset:
        check_sent(poset, brute, node)
        check_sent(poset, brute, node, data.draw(_wanted))


@settings(max_examples=60, deadline=None)
@given(subscription_lists(min_size=2, max_size=10), st.data())
def test_sends_and_unsends_change_what_is_sent_above_every_node_they_cover(entries, data):
    """One node sent, unsent, sent for more labels, one destination at a time: what every node
    misses follows (the sent index tracks the nodes with something sent)."""
    poset, _, brute = grown(data, entries)
    if not len(poset):
        return
    for _ in range(data.draw(st.integers(1, 6))):
        nodes = list(poset)
        node = data.draw(st.sampled_from(nodes))
        destination = data.draw(st.sampled_from(DESTINATIONS))
        if data.draw(st.booleans()):
            poset.mark_sent(node, destination, data.draw(labels()))
        else:
            poset.unmark_sent(node, destination)
        assert poset.statistics().sent_nodes == sum(1 for n in nodes if n.sent)
        for other in nodes:
            check_sent(poset, brute, other)
