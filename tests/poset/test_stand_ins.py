"""A router that follows the poset's contract (``poset.poset``, "Stand-ins") never leaves a label
uncarried: after every step of its churn, each node's wanted labels at each destination are
carried by the node or by a sent node covering it (brute force, ``tests.poset.oracle``).

The router is the super-peer core's, reduced: it sends an inserted node where ``missing`` says
(``SuperPeerCore._route``) or plans many at once (``_route_many``); a removal's and a
withdrawal's resends are sent; wants change per node (an origin's advertisement comes or goes):
grown, the node is routed again; shrunk, narrowed (``_narrow``: withdrawn, re-sent for what it
keeps, what it stood in for resent). A removal finds what to resend only among what the
removed node was found to stand in for, so a look-up this router skips, or a record the
poset drops, shows here as a label no sent node carries."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qel
from poset.poset import PosetNode, SubscriptionPoset
from tests.poset.oracle import (
    DESTINATIONS,
    LABELS,
    Brute,
    hot_nodes_every_look_up,
    subscription_lists,
)

_CLASSES = 5
"""Wants are drawn per node id modulo this and destination."""


class _Router:
    def __init__(self, poset: SubscriptionPoset, table: dict[tuple[int, str], frozenset[str]]):
        self.poset = poset
        self.table = table

    def wants(self, node: PosetNode, destination: str) -> set[str]:
        return set(self.table[node.id % _CLASSES, destination])

    def destinations(self, node: PosetNode) -> dict[str, set[str]]:
        return {d: self.wants(node, d) for d in DESTINATIONS if self.wants(node, d)}

    def route(self, node: PosetNode) -> None:
        for destination, labels in self.poset.missing(node, self.destinations(node)).items():
            self.poset.mark_sent(node, destination, labels)

    def route_many(self, nodes: list[PosetNode]) -> None:
        plans = {}
        for node in nodes:
            for destination, needed in self.poset.missing(node, self.destinations(node)).items():
                plan = plans.setdefault(destination, self.poset.plan())
                missing = plan.missing(node, needed)
                if missing:
                    plan.choose(node, missing)
        for destination, plan in sorted(plans.items()):
            for node, labels in plan.thinned():
                self.poset.mark_sent(node, destination, labels)  # type: ignore[arg-type]

    def remove(self, source: str, subscription_id: str) -> None:
        removed = self.poset.remove(source, subscription_id, self.wants)
        for destination, entries in removed.resend.items():
            for node, labels in entries:
                self.poset.mark_sent(node, destination, labels)  # type: ignore[arg-type]
        if not removed.deleted:
            self.narrow(removed.node)
            self.route(removed.node)

    def narrow(self, node: PosetNode) -> None:
        for destination in sorted(node.sent):
            have = set(node.sent[destination])
            keep = have & self.wants(node, destination)
            if keep == have:
                continue
            resend = self.poset.withdraw(node, destination, self.wants)
            if keep:
                self.poset.mark_sent(node, destination, keep)
            for below, labels in resend:
                if set(labels) - keep:
                    self.poset.mark_sent(below, destination, set(labels) - keep)  # type: ignore[arg-type]


def _uncarried(router: _Router, brute: Brute) -> list[tuple[int, str, list[str]]]:
    found = []
    for node in router.poset:
        for destination in DESTINATIONS:
            lost = router.wants(node, destination) - brute.sent_labels(node, destination)
            if lost:
                found.append((node.id, destination, sorted(lost)))
    return found


_wanted = st.frozensets(st.sampled_from(LABELS))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(subscription_lists(min_size=3, max_size=14), st.data())
def test_a_router_keeping_the_contract_leaves_no_wanted_label_uncarried(entries, data):
    _churn(entries, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(subscription_lists(min_size=3, max_size=14), st.data())
def test_the_same_with_the_sent_index_asking_its_hot_nodes_first(entries, data):
    """The hot nodes a look-up tests before the index record stand-ins as the index does."""
    with hot_nodes_every_look_up():
        _churn(entries, data)


def _churn(entries: list[qel.Subscription], data: st.DataObject) -> None:
    table = {(k, d): data.draw(_wanted) for k in range(_CLASSES) for d in DESTINATIONS}
    poset = SubscriptionPoset()
    router = _Router(poset, table)
    brute = Brute(poset)
    live: list[tuple[str, str]] = []
    pending = list(enumerate(entries))
    while pending or live:
        action = data.draw(st.sampled_from(["insert", "insert", "remove", "wants", "reroute"]))
        if action == "insert" and pending:
            number, subscription = pending.pop(0)
            source = data.draw(st.sampled_from("abc"))
            inserted = poset.insert(subscription, source, str(number))
            live.append((source, str(number)))
            if data.draw(st.booleans()):
                router.route(inserted.node)
            else:
                router.route_many([inserted.node])
        elif action == "remove" and live:
            key = live.pop(data.draw(st.integers(0, len(live) - 1)))
            router.remove(*key)
        elif action == "wants":
            slot = (
                data.draw(st.integers(0, _CLASSES - 1)),
                data.draw(st.sampled_from(DESTINATIONS)),
            )
            table[slot] = data.draw(_wanted)
            changed = [n for n in poset.general_first() if n.id % _CLASSES == slot[0]]
            for node in changed:
                router.narrow(node)
            router.route_many(changed)
        elif action == "reroute":
            router.route_many(poset.general_first())
        elif not pending and not live:
            break
        else:
            continue
        assert not _uncarried(router, brute), _uncarried(router, brute)
    assert len(poset) == 0


def test_a_sent_node_stands_in_only_for_what_a_look_up_found_under_it():
    """Of two nodes under a sent one, the one asked about is resent when it goes; the one no
    router asked about (here: inserted after, never routed) is not: the poset's answer is
    the look-ups', not a search of everything the removed node covers."""
    prefix = "@prefix ex: <http://example.org/> .\n"
    broad = qel.parse_subscription(prefix + "X : t(X, ex:p, P), P >= 0")
    asked = qel.parse_subscription(prefix + "X : t(X, ex:p, P), P >= 1")
    silent = qel.parse_subscription(prefix + "X : t(X, ex:p, P), P >= 0, P < 1")
    poset = SubscriptionPoset()
    top = poset.insert(broad, "a", "1").node
    poset.mark_sent(top, "d1", {"o1"})
    below = poset.insert(asked, "a", "2").node
    assert poset.missing(below, {"d1": {"o1"}}) == {}
    poset.insert(silent, "a", "3")
    removed = poset.remove("a", "1")
    assert removed.resend == {"d1": ((below, frozenset({"o1"})),)}
