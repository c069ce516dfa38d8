"""What a sent subscription's removal, or its withdrawal from a destination, asks to resend
(``Removed.resend``, ``withdraw``), and the plans they are built with (``poset.plans``), against
brute force (``tests.poset.oracle.check_resend``): complete (every node it covered keeps every
label it wants there carried by a sent node or an entry covering it), thin (no label carried
twice along covering, none already carried by a sent node), and exactly the entries of the
most general nodes; the default wants (the removed node's labels) and drawn ones."""

from __future__ import annotations

import itertools

from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from poset.plans import RECENT_COVERING
from poset.poset import PosetNode, SubscriptionPoset, general_order
from tests.poset.oracle import (
    DESTINATIONS,
    LABELS,
    Brute,
    ask_missing,
    check_invariants,
    check_resend,
    drawn_wants,
    grown,
    labels,
    q,
    subscription_lists,
    wants_tables,
)

_WANTS = st.one_of(st.none(), wants_tables())
"""None: the default wants; else the table of ``drawn_wants``."""


def _covering(data, brute: Brute, nodes: list[PosetNode]) -> PosetNode:
    """One of the nodes, mostly one that covers another, sent somewhere (more often than not
    to a destination it was sent to already)."""
    covering = [node for node in nodes if brute.covered_by(node)]
    if covering and data.draw(st.integers(0, 4)):
        nodes = covering
    node = data.draw(st.sampled_from(nodes))
    if not node.sent or data.draw(st.booleans()):
        destinations = sorted(node.sent) if node.sent and data.draw(st.booleans()) else DESTINATIONS
        poset = brute.poset
        poset.mark_sent(node, data.draw(st.sampled_from(destinations)), data.draw(labels()))
        ask_missing(poset, send=True)  # as a router: unsent only what a look-up found covered
    return node


@settings(max_examples=250, deadline=None)
@given(subscription_lists(min_size=3, max_size=12), _WANTS, st.data())
def test_a_removal_resends_what_the_removed_node_covered_completely_and_thinly(
    entries, table, data
):
    """One to three removals, mostly of a node covering others and sent (then the last of its
    pairs deletes it), with the default wants or drawn ones, each resend marked sent as a
    router would before the next; the answers hold after."""
    poset, live, brute = grown(data, entries)
    if not live:
        return
    for _ in range(data.draw(st.integers(1, 3))):
        if not live:
            break
        node = _covering(data, brute, list(poset))
        key = data.draw(st.sampled_from([k for k in sorted(live) if poset.node_of(*k) is node]))
        last = len(node.origins) == 2
        below = brute.covered_by(node)
        sent = {d: set(held) for d, held in node.sent.items()}
        wants = drawn_wants(table) if table is not None else None
        removed = poset.remove(*key, wants)
        del live[key]
        assert removed.node is node and removed.deleted == last
        if not last:
            assert removed.resend == {} and removed.retract == ()
            continue
        assert removed.retract == tuple(sorted(sent))
        event(f"entries resent: {min(sum(map(len, removed.resend.values())), 3)}")
        check_resend(brute, node, below, sent, removed.resend, wants)
        for destination, resend in removed.resend.items():  # as a router would
            for entry, held in resend:
                poset.mark_sent(entry, destination, held)
    check_invariants(poset, live, brute)


@settings(max_examples=250, deadline=None)
@given(subscription_lists(min_size=3, max_size=12), wants_tables(), st.data())
def test_a_withdrawal_resends_what_the_node_covered_completely_and_thinly(entries, table, data):
    """One to three withdrawals, mostly of a node covering others from a destination it was
    sent to (sometimes one it was not), with drawn wants: the node keeps its other
    destinations; each resend marked sent as a router would before the next."""
    poset, _, brute = grown(data, entries)
    if not len(poset):
        return
    for _ in range(data.draw(st.integers(1, 3))):
        node = _covering(data, brute, list(poset))
        destination = data.draw(st.sampled_from(sorted(node.sent) + list(DESTINATIONS)))
        below = brute.covered_by(node)
        others = {d: set(held) for d, held in node.sent.items() if d != destination}
        wants = drawn_wants(table)
        resend = poset.withdraw(node, destination, wants)
        assert node.sent == others
        event(f"entries resent: {min(len(resend), 3)}")
        check_resend(
            brute, node, below, {destination: set()}, {destination: resend} if resend else {}, wants
        )
        for entry, held in resend:
            poset.mark_sent(entry, destination, held)
    check_invariants(poset, brute=brute)


@settings(max_examples=250, deadline=None)
@given(subscription_lists(min_size=1, max_size=12), st.data())
def test_a_plan_in_any_order_carries_what_one_in_general_first_order_does(entries, data):
    """Each node wants some labels; a plan chooses each for what the nodes chosen before it
    and covering it do not carry, in ``general_first`` order, in a random (wrong) order, or
    choosing every node for all it wants: thinned, the three carry the same labels over every
    node, none carries a label twice along covering, and the first (and the third, in its
    order) are exactly each node less what the nodes standing for it want."""
    poset, _, brute = grown(data, entries)
    nodes = poset.general_first()
    wants = {node.id: data.draw(st.sets(st.sampled_from(LABELS))) for node in nodes}
    wanted = [(node, wants[node.id]) for node in nodes]

    def planned(order, subtracting=True):
        plan = poset.plan()
        chosen: dict[int, set[str]] = {}
        for node in order:
            over = brute.carried([(n, chosen[n.id]) for n in order if n.id in chosen], node)
            asked = set(wants[node.id])
            assert plan.missing(node, asked) == wants[node.id] - over
            assert asked == wants[node.id], "not changed"
            missing = wants[node.id] - over if subtracting else wants[node.id]
            if missing:
                plan.choose(node, missing)
                chosen.setdefault(node.id, set()).update(missing)
        assert bool(plan) == bool(chosen)
        return [(node, set(held)) for node, held in plan.thinned()]

    wrong = data.draw(st.permutations(nodes))
    right, shuffled, whole = planned(nodes), planned(wrong), planned(wrong, subtracting=False)
    event(f"entries: {min(len(right), 4)}; wrong order differs: {shuffled != right}")
    for kept in (right, shuffled, whole):
        for node in nodes:
            assert brute.carried(kept, node) == brute.carried(wanted, node)
        for (first, first_labels), (second, second_labels) in itertools.permutations(kept, 2):
            assert first is not second
            if brute.covers(first, second):
                assert not first_labels & second_labels
        for node, held in kept:
            assert held and held <= wants[node.id]

    def canonical(order):
        found = []
        for node in order:
            rest = set(wants[node.id])
            for other in nodes:
                if brute.beats(other, node):
                    rest -= wants[other.id]
            if rest:
                found.append((node.id, rest))
        return found

    assert [(n.id, held) for n, held in right] == canonical(nodes)
    assert [(n.id, held) for n, held in whole] == canonical(wrong)
    assert [n.id for n, _ in right] == [
        n.id for n in sorted((n for n, _ in right), key=general_order)
    ]


def test_choosing_a_node_again_adds_to_its_labels():
    poset = SubscriptionPoset()
    broad = poset.insert(q("X : t(X, ex:p, P)"), "a", "1").node
    narrow = poset.insert(q("X : t(X, ex:p, P), P > 1"), "a", "2").node
    plan = poset.plan()
    assert not plan and plan.missing(narrow, {"o1"}) == {"o1"}
    plan.choose(narrow, {"o1", "o2"})
    plan.choose(broad, {"o1"})
    plan.choose(broad, {"o3"})
    assert plan.missing(narrow, set(LABELS)) == set()
    assert plan.missing(broad, set(LABELS)) == {"o2"}
    assert plan.missing(broad, set()) == set()
    assert plan.thinned() == ((narrow, frozenset({"o2"})), (broad, frozenset({"o1", "o3"})))


def test_a_plan_asks_the_chosen_that_covered_its_latest_look_ups_first_and_keeps_a_few():
    """``Plan.missing`` tests the chosen ones that covered its latest look-ups before the index,
    at most ``RECENT_COVERING`` of them: whether they answer a look-up whole or in part, the
    answer is the one the index alone gives."""
    poset = SubscriptionPoset()
    count = RECENT_COVERING + 8
    broad = [
        poset.insert(qel.parse_subscription(f"X : t(X, dc:date, D), D > {n}"), "p", f"b{n}").node
        for n in range(count)
    ]
    narrow = poset.insert(qel.parse_subscription("X : t(X, dc:date, D), D > 100"), "p", "n").node
    plan = poset.plan()
    for n, node in enumerate(broad):
        plan.choose(node, {f"o{n}"})
    labels = {f"o{n}" for n in range(count)}
    assert plan.missing(narrow, set(labels)) == set()
    assert len(plan._recent) == RECENT_COVERING
    assert plan.missing(narrow, labels | {"x"}) == {"x"}, "the remembered ones, then the index"
    assert plan.missing(narrow, {"o0"}) == set()
    assert plan.missing(broad[0], {"o1", "o0"}) == {"o1"}, "o1's chosen one does not cover it"
