"""Brute-force oracles for the subscription poset, and the small posets its property tests draw.

The oracle knows nothing of the poset's indexes: covering is ``qel.covers`` (with a search
budget no test here exhausts) asked of every pair of nodes, matching is ``qel.matches`` asked of
every subscription. The posets are small (a dozen subscriptions) and dense in covering: nested
ranges and DNFs over two predicates, subscriptions equivalent to each other though written apart
(separate nodes that cover each other), the listings' alerts, members of templates that differ
in their bounds alone, samples of the workloads (shapes with many broad ones, listings, the
digital library), and the shared random vocabulary (``tests.strategies``); with destinations
and labels marked sent and unmarked at random (``grow``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from fractions import Fraction
from unittest import mock

from hypothesis import strategies as st

import qel
from poset import sent_index
from poset.plans import Resend
from poset.poset import PosetNode, SubscriptionPoset, general_order
from qel.filters import witness
from qel.terms import URI, number
from tests.strategies import publications, subscriptions
from workloads.digital_library import DigitalLibrary
from workloads.listings import Listings
from workloads.shapes import Shapes

P = "@prefix ex: <http://example.org/> .\n"
EX = "http://example.org/"
BUDGET = 10**6
"""``qel.covers``'s search budget in the oracle: never exhausted here (the poset's shortcuts
decide some pairs exactly where the default budget could give up)."""

DESTINATIONS = ("d1", "d2", "d3")
LABELS = ("o1", "o2", "o3")


def q(text: str) -> qel.Subscription:
    return qel.parse_subscription(P + text)


# -- subscriptions ----------------------------------------------------------------------------


def _two(constraint: str) -> qel.Subscription:
    return q("X : t(X, ex:p, P), t(X, ex:q, Q), " + constraint)


_bounds = st.integers(0, 6)
nested_ranges = st.one_of(
    st.builds(lambda a: _two(f"P >= {a}"), _bounds),
    st.builds(lambda a, b: _two(f"P >= {a}, Q <= {b}"), _bounds, _bounds),
    st.builds(lambda a, b: _two(f"(P >= {a} ; Q <= {b})"), _bounds, _bounds),
    st.builds(lambda a, b: _two(f"P > {a}, P < {a + b + 1}"), _bounds, _bounds),
    st.builds(lambda a: q(f"X : t(X, ex:p, P), P <= {a}"), _bounds),
    st.just(q("X : t(X, ex:p, P)")),
)
"""Ceilings and floors on one or two predicates, a DNF of two, windows: many cover others."""

_EQUIVALENT_FORMS = (
    "X : t(X, ex:issued, V), (V < {k} ; V >= {k})",
    "X : t(X, ex:issued, V), (V <= {k} ; V > {k})",
    "X : t(X, ex:issued, V), (V > {k} ; V < {l})",
    "X : t(X, ex:issued, V), V > {k}",
    "X : t(X, ex:issued, V), (V > {k}, V < {l} ; V >= {l})",
    "X : t(X, ex:issued, V), (V > {k}, V <= {l} ; V > {l})",
    "X : t(X, ex:issued, V), V >= {k}, V <= {l}",
    "X : t(X, ex:issued, V), (V >= {k}, V < {l} ; V = {l})",
    "X : t(X, ex:issued, V)",
)
equivalents = st.builds(
    lambda form, k: q(form.format(k=k, l=k + 2)),
    st.sampled_from(_EQUIVALENT_FORMS),
    st.integers(0, 2),
)
"""Any number, a floor, a window, each written in several ways (separate nodes, each covering
the others: the ties that the lower id breaks), nested in one another, and any value at all
above them."""


@st.composite
def dnf_ranges(draw: st.DrawFn) -> qel.Subscription:
    """One or two patterns on ``ex:p`` and ``ex:q`` (a predicate may repeat) under a DNF of
    comparisons with small integers: ranges that overlap, nest and share ends."""
    predicates = draw(st.lists(st.sampled_from(["p", "q"]), min_size=1, max_size=2))
    patterns = ", ".join(f"t(X, ex:{p}, V{i})" for i, p in enumerate(predicates))
    alternatives = [
        ", ".join(
            f"V{draw(st.integers(0, len(predicates) - 1))} "
            f"{draw(st.sampled_from(['<', '<=', '>', '>=', '=']))} {draw(st.integers(0, 8))}"
            for _ in range(draw(st.integers(1, 2)))
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    constraint = f", ({' ; '.join(f'({a})' for a in alternatives)})" if alternatives else ""
    try:
        return q(f"X : {patterns}{constraint}")
    except qel.QueryError:  # an unsatisfiable draw
        return q(f"X : {patterns}")


PRICES = ("1", "2", "3", "4", "2.5", "0.12345678901234567891")
"""The last a bound no float holds (the witness index orders values by floats first)."""


@st.composite
def alerts(draw: st.DrawFn) -> qel.Subscription:
    """Listings-shaped alerts over two cities and small value sets: price ranges, DNF, ceilings
    (with and without a city), a city alone."""
    city = draw(st.sampled_from(["ex:c1", "ex:c1", "ex:c1", "ex:c2"]))
    low, high = sorted(draw(st.sampled_from(PRICES)) for _ in range(2))
    shape = draw(
        st.sampled_from(["range", "range", "dnf", "dnf", "ceiling", "bare ceiling", "city"])
    )
    if shape == "range":
        text = f"X : t(X, ex:city, {city}), t(X, ex:price, P), P >= {low}, P <= {high}"
    elif shape == "dnf":
        text = (
            f"X : t(X, ex:city, {city}), t(X, ex:price, P), t(X, ex:surface, S), "
            f"(P <= {high} ; S >= {low})"
        )
    elif shape == "ceiling":
        text = f"X : t(X, ex:city, {city}), t(X, ex:price, P), P <= {high}"
    elif shape == "bare ceiling":
        text = f"X : t(X, ex:price, P), P < {high}"
    else:
        text = f"X : t(X, ex:city, {city})"
    return q(text)


_FAMILY_PREDICATES = ("ex:p", "ex:q", "ex:r")
_KINDS = ("any", "fixed", "low", "high", "both")


@st.composite
def templates(draw: st.DrawFn) -> tuple[int, list[list[str]]]:
    """How many patterns, and per alternative the kind of constraint on each."""
    patterns = draw(st.integers(1, 3))
    alternatives = draw(st.integers(1, 3))
    return patterns, [
        [draw(st.sampled_from(_KINDS)) for _ in range(patterns)] for _ in range(alternatives)
    ]


@st.composite
def members(draw: st.DrawFn, template: tuple[int, list[list[str]]]) -> qel.Subscription:
    """A subscription of the template, with drawn bounds (its fixed values are the template's):
    members of one template differ in their bounds alone, and cover one another often."""
    patterns, alternatives = template
    conjunctions = []
    for kinds in alternatives:
        atoms = []
        for number_, kind in enumerate(kinds):
            variable = f"V{number_}"
            if kind == "fixed":
                atoms.append(f"{variable} = {number_}")
            if kind in ("low", "both"):
                op = draw(st.sampled_from([">", ">="]))
                atoms.append(f"{variable} {op} {draw(st.integers(0, 3))}")
            if kind in ("high", "both"):
                op = draw(st.sampled_from(["<", "<="]))
                atoms.append(f"{variable} {op} {draw(st.integers(0, 3))}")
        conjunctions.append(", ".join(atoms))
    triples = ", ".join(f"t(X, {_FAMILY_PREDICATES[n]}, V{n})" for n in range(patterns))
    try:
        if all(conjunctions):
            return q(f"X : {triples}, ({' ; '.join(conjunctions)})")
    except qel.QueryError:  # an unsatisfiable draw (V0 > 2, V0 < 1)
        pass
    return q(f"X : {triples}")  # an unconstrained alternative: the subscription is its patterns


def family_lists(min_size: int, max_size: int) -> st.SearchStrategy[list[qel.Subscription]]:
    """Members of one or two templates."""
    return st.tuples(templates(), templates()).flatmap(
        lambda two: st.lists(
            st.one_of(members(two[0]), members(two[1])), min_size=min_size, max_size=max_size
        )
    )


WORKLOADS: dict[str, Callable[[int], object]] = {
    "shapes": lambda seed: Shapes(seed=seed, broad=0.4),
    "listings": lambda seed: Listings(seed=seed),
    "library": lambda seed: DigitalLibrary(seed=seed),
}
POOL = 30


@functools.cache
def pool(workload: str, seed: int) -> tuple[qel.Subscription, ...]:
    """The first ``POOL`` subscriptions a workload draws from a seed (repeats included)."""
    drawn = WORKLOADS[workload](seed)
    return tuple(qel.parse_subscription(drawn.subscription()) for _ in range(POOL))  # type: ignore[attr-defined]


@functools.cache
def pool_publications(workload: str, seed: int) -> tuple[qel.Publication, ...]:
    """A few publications the workload draws from the seed."""
    drawn = WORKLOADS[workload](seed)
    if workload == "shapes":
        texts = [drawn.turtle(drawn.vehicle(n)) for n in range(6)]  # type: ignore[attr-defined]
    elif workload == "listings":
        texts = [drawn.turtle(drawn.listing(n)) for n in range(6)]  # type: ignore[attr-defined]
    else:
        texts = [drawn.turtle(drawn.document(n)) for n in range(6)]  # type: ignore[attr-defined]
    return tuple(qel.parse_publications(text, id=str(n))[0] for n, text in enumerate(texts))


def workload_lists(min_size: int, max_size: int) -> st.SearchStrategy[list[qel.Subscription]]:
    return st.tuples(st.sampled_from(sorted(WORKLOADS)), st.integers(0, 5)).flatmap(
        lambda drawn: st.lists(st.sampled_from(pool(*drawn)), min_size=min_size, max_size=max_size)
    )


random_subscriptions = subscriptions(max_patterns=2, max_disjuncts=3)
"""The shared small vocabulary (``tests.strategies``): DNFs, constants, subject constraints."""


def subscription_lists(min_size: int = 1, max_size: int = 12):
    """A list of subscriptions of one kind (so that covering is dense), or of all kinds."""

    def lists(elements):
        return st.lists(elements, min_size=min_size, max_size=max_size)

    return st.one_of(
        lists(st.one_of(nested_ranges, equivalents)),
        lists(equivalents),
        lists(dnf_ranges()),
        lists(alerts()),
        family_lists(min_size, max_size),
        workload_lists(min_size, max_size),
        lists(random_subscriptions),
        lists(st.one_of(nested_ranges, equivalents, dnf_ranges(), alerts(), random_subscriptions)),
    )


# -- publications -----------------------------------------------------------------------------

_NUMBERS = [0, 1, 2, 3, 4, 5, 6, 7, 8, Fraction(5, 2), Fraction(-1, 2)]
_SMALL_PREDICATES = [URI(EX + name) for name in ("p", "q", "issued", "price", "surface")]


@st.composite
def small_publications(draw: st.DrawFn) -> qel.Publication:
    """A publication on the predicates of the nested ranges, the equivalents and the alerts."""
    statements = {
        (draw(st.sampled_from(_SMALL_PREDICATES)), number(draw(st.sampled_from(_NUMBERS))))
        for _ in range(draw(st.integers(1, 4)))
    }
    if draw(st.booleans()):
        statements.add((URI(EX + "city"), URI(EX + draw(st.sampled_from(["c1", "c2"])))))
    return qel.Publication(URI(EX + "doc1"), frozenset(statements), "peer", "x")


def publications_for(subscriptions_: list[qel.Subscription], max_size: int = 5):
    """Publications that match some of the subscriptions (their filters' witnesses), and others
    (the workloads', the small vocabularies')."""
    witnesses = [witness(compiled) for s in subscriptions_ for compiled in s.filters]
    workload_ones = [p for w in sorted(WORKLOADS) for p in pool_publications(w, 0)]
    elements = st.one_of(
        st.sampled_from(witnesses) if witnesses else st.nothing(),
        small_publications(),
        publications(),
        st.sampled_from(workload_ones),
    )
    return st.lists(elements, max_size=max_size)


# -- posets drawn with sends --------------------------------------------------------------------


def labels() -> st.SearchStrategy[set[str]]:
    return st.sets(st.sampled_from(LABELS), min_size=1)


def grow(
    data: st.DataObject, poset: SubscriptionPoset, subscriptions_: list[qel.Subscription]
) -> dict[tuple[str, str], qel.Subscription]:
    """Inserts the subscriptions (from sources ``a``, ``b``, ``c``, ids by position), and between
    insertions draws a removal, a ``mark_sent`` of some node to a destination for some labels, or
    an ``unmark_sent``; then a few more sends. Returns the live (source, id) pairs."""
    live: dict[tuple[str, str], qel.Subscription] = {}
    for number_, subscription in enumerate(subscriptions_):
        source = data.draw(st.sampled_from("abc"))
        poset.insert(subscription, source, str(number_))
        live[source, str(number_)] = subscription
        step(
            data,
            poset,
            live,
            data.draw(st.sampled_from(["none", "send", "send", "unsend", "remove"])),
        )
    for _ in range(data.draw(st.integers(0, 3))):
        step(data, poset, live, "send")
    ask_missing(poset, send=True)
    return live


@contextlib.contextmanager
def hot_nodes_every_look_up() -> Iterator[None]:
    """The sent index ranks its hot nodes (``poset.sent_index``, "The broad ones first") at
    every look-up, and keeps two: the posets drawn here are asked far fewer look-ups than the
    ``HOT_RANKED_EVERY`` between two rankings, so by default their hot nodes stay none."""
    with (
        mock.patch.object(sent_index, "HOT_RANKED_EVERY", 1),
        mock.patch.object(sent_index, "HOT", 2),
    ):
        yield


def ask_missing(
    poset: SubscriptionPoset,
    destinations: Iterable[str] = DESTINATIONS,
    labels: Iterable[str] = LABELS,
    *,
    send: bool = False,
) -> None:
    """Asks ``missing`` of every node, most general first, for ``labels`` at every destination,
    as a router asks before it leaves a node unsent (``poset.poset``, "Stand-ins"); with
    ``send``, marks sent what is missing, as a router wanting every label everywhere would. The
    sends and removals drawn here are not a router's, and a removal resends only what a sent
    node was found to stand in for."""
    for node in poset.general_first():
        missing = poset.missing(node, {destination: set(labels) for destination in destinations})
        if send:
            for destination, left in missing.items():
                poset.mark_sent(node, destination, left)


def step(
    data: st.DataObject,
    poset: SubscriptionPoset,
    live: dict[tuple[str, str], qel.Subscription],
    action: str,
) -> None:
    """One of ``grow``'s steps: ``none``, ``remove`` (a live pair), ``send`` or ``unsend``."""
    nodes = list(poset)
    if not nodes or action == "none":
        return
    if action == "remove":
        key = data.draw(st.sampled_from(sorted(live)))
        poset.remove(*key)
        del live[key]
        return
    node = data.draw(st.sampled_from(nodes))
    destination = data.draw(st.sampled_from(DESTINATIONS))
    if action == "send":
        poset.mark_sent(node, destination, data.draw(labels()))
    else:
        poset.unmark_sent(node, destination)


# -- the oracle ---------------------------------------------------------------------------------


def grown(
    data: st.DataObject, subscriptions_: list[qel.Subscription]
) -> tuple[SubscriptionPoset, dict[tuple[str, str], qel.Subscription], Brute]:
    """A new poset ``grow`` made of the subscriptions, its live pairs and its oracle."""
    poset = SubscriptionPoset()
    live = grow(data, poset, subscriptions_)
    return poset, live, Brute(poset)


class Brute:
    """Covering and what was sent, by brute force over a poset's nodes (covering cached by node
    id: ids are never reused)."""

    def __init__(self, poset: SubscriptionPoset) -> None:
        self.poset = poset
        self._covers: dict[tuple[int, int], bool] = {}

    def covers(self, general: PosetNode, specific: PosetNode) -> bool:
        """Whether ``general``'s subscription covers ``specific``'s (a node covers itself)."""
        if general is specific:
            return True
        key = general.id, specific.id
        found = self._covers.get(key)
        if found is None:
            found = self._covers[key] = qel.covers(
                general.subscription, specific.subscription, budget=BUDGET
            )
        return found

    def beats(self, first: PosetNode, second: PosetNode) -> bool:
        """Whether ``first`` stands for ``second``: it covers it and is not covered back, or
        they cover each other and ``first`` has the lower id."""
        return (
            first is not second
            and self.covers(first, second)
            and (first.id < second.id or not self.covers(second, first))
        )

    def covering(self, node: PosetNode) -> list[PosetNode]:
        """The nodes of the poset that cover ``node`` (itself, if in the poset)."""
        return [other for other in self.poset if self.covers(other, node)]

    def covered_by(self, node: PosetNode) -> list[PosetNode]:
        """The other nodes ``node`` covers, by ``general_order``."""
        found = [o for o in self.poset if o is not node and self.covers(node, o)]
        return sorted(found, key=general_order)

    def sent_above(self, node: PosetNode) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for other in self.covering(node):
            for destination, held in other.sent.items():
                found.setdefault(destination, set()).update(held)
        return found

    def sent_labels(self, node: PosetNode, destination: str) -> set[str]:
        return self.sent_above(node).get(destination, set())

    def carried(
        self, entries: Iterable[tuple[PosetNode, Iterable[str]]], node: PosetNode
    ) -> set[str]:
        """The labels that entries covering ``node`` (itself included) carry."""
        return {label for other, held in entries if self.covers(other, node) for label in held}


def match(
    live: Mapping[tuple[str, str], qel.Subscription], publication: qel.Publication
) -> dict[str, set[str]]:
    """The fan-out by brute force: per source, the ids of its live subscriptions that match."""
    found: dict[str, set[str]] = {}
    for (source, subscription_id), subscription in live.items():
        if qel.matches(subscription, publication):
            found.setdefault(source, set()).add(subscription_id)
    return found


def check_invariants(
    poset: SubscriptionPoset,
    live: Mapping[tuple[str, str], qel.Subscription] | None = None,
    brute: Brute | None = None,
) -> None:
    """Everything the poset answers about its nodes, against brute force: sources and the
    by-source look-ups (against ``live``, the (source, id) pairs inserted and not removed, if
    given), one node per compiled filters, the orders, ``covered_by``, what was sent for each
    node or one covering it (``sent_labels``, ``missing``), the statistics."""
    brute = brute or Brute(poset)
    nodes = list(poset)
    assert [n.id for n in nodes] == sorted(n.id for n in nodes)
    assert len(poset) == len(nodes)
    assert len({n.subscription.filters for n in nodes}) == len(nodes), "one node per filters"
    pairs = []
    for node in nodes:
        assert poset.node(node.id) is node
        assert node.origins, "a node without sources must have left the poset"
        for source, ids in node.sources.items():
            for subscription_id in ids:
                assert poset.node_of(source, subscription_id) is node
                pairs.append((source, subscription_id))
    assert len(pairs) == len(set(pairs))
    if live is not None:
        assert sorted(pairs) == sorted(live)
        for (source, subscription_id), subscription in live.items():
            assert (
                poset.node_of(source, subscription_id).subscription.filters == subscription.filters
            )  # type: ignore[union-attr]
        for source in {s for s, _ in live} | {"nobody"}:
            ids = sorted(i for s, i in live if s == source)
            assert poset.ids_of(source) == ids
            assert poset.count_of(source) == len(ids)
    assert poset.general_first() == sorted(nodes, key=general_order)
    for node in nodes:
        assert [n.id for n in poset.covered_by(node)] == [n.id for n in brute.covered_by(node)]
        check_sent(poset, brute, node)
    for general, specific in itertools.permutations(nodes, 2):
        if brute.covers(general, specific):  # what ``general_first`` and ``covers`` rely on
            assert general_order(general)[0] <= general_order(specific)[0]
    statistics = poset.statistics()
    assert statistics.nodes == len(nodes)
    assert statistics.sources == len(pairs)
    assert statistics.sent_nodes == sum(1 for n in nodes if n.sent)
    assert statistics.sent == sum(len(held) for n in nodes for held in n.sent.values())
    assert statistics.memory_bytes > 0 or not nodes


def everything() -> dict[str, set[str]]:
    """Every label wanted at every destination (a ``wanted`` for ``missing``)."""
    return {destination: set(LABELS) for destination in DESTINATIONS}


def check_sent(
    poset: SubscriptionPoset,
    brute: Brute,
    node: PosetNode,
    wanted: Mapping[str, set[str]] | None = None,
) -> None:
    """What was sent for ``node`` or a node covering it (itself included), by brute force:
    ``sent_labels`` per destination, and ``missing`` asked with ``wanted`` (by default
    ``everything``): the same dictionary, each destination less those labels, a destination
    whose labels were all sent left out (one wanted for no label stays)."""
    above = brute.sent_above(node)
    for destination in DESTINATIONS:
        assert poset.sent_labels(node, destination) == above.get(destination, set())
    asked = {d: set(held) for d, held in (wanted or everything()).items()}
    expected = {
        destination: held - above.get(destination, set())
        for destination, held in asked.items()
        if not held or held - above.get(destination, set())
    }
    found = poset.missing(node, asked)
    assert found is asked, "changed in place"
    assert found == expected


def check_resend(
    brute: Brute,
    gone: PosetNode,
    below: list[PosetNode],
    sent_before: Mapping[str, set[str]],
    resend: Mapping[str, Resend],
    wants: Callable[[PosetNode, str], set[str]] | None = None,
) -> None:
    """What a removal (or a withdrawal) of ``gone`` asks to resend, per destination it was sent
    to (``sent_before``), for the nodes it covered (``below``, still in the poset):

    * completeness: each of those nodes has every label it wants there carried by a sent node
      covering it or by a resend entry covering it (itself included);
    * thinness: an entry is for labels it wants, none carried by a sent node covering it, none
      that an entry standing for it carries (one covering it, not covered back or of a lower
      id); among any two entries one of which covers the other, no label twice;
    * exactly: the entries are, in ``general_order``, each node less the labels sent above it
      and those the nodes standing for it want (nothing left: no entry).

    ``wants``: by default, the labels ``gone`` was sent there with (``remove``'s default)."""
    if wants is None:

        def wants(node: PosetNode, destination: str) -> set[str]:
            return set(sent_before[destination])

    assert set(resend) <= set(sent_before)
    assert all(resend.values()), "no destination with nothing to resend"
    for destination in sorted(sent_before):
        entries = resend.get(destination, ())
        held = [(node, set(labels)) for node, labels in entries]
        for node, labels in held:
            assert node in below, "resend only what the removed node covered"
            assert labels, "an entry with no label"
            assert labels <= wants(node, destination)
            assert not labels & brute.sent_labels(node, destination), (
                "already carried by a sent node"
            )
        for (first, first_labels), (second, second_labels) in itertools.permutations(held, 2):
            assert first is not second, "a node twice"
            if brute.covers(first, second):
                assert not first_labels & second_labels, (
                    f"{destination}: {sorted(first_labels & second_labels)} twice, over "
                    f"node {first.id} and node {second.id} it covers"
                )
        for node in below:
            needed = wants(node, destination)
            have = brute.sent_labels(node, destination) | brute.carried(held, node)
            assert needed <= have, (
                f"{destination}: node {node.id} misses {sorted(needed - have)} (resend "
                f"{[(n.id, sorted(labels)) for n, labels in held]})"
            )
        expected = []
        for node in below:
            rest = wants(node, destination) - brute.sent_labels(node, destination)
            for other in below:
                if brute.beats(other, node):
                    rest -= wants(other, destination)
            if rest:
                expected.append((node.id, rest))
        assert [(n.id, labels) for n, labels in held] == expected


def wants_tables() -> st.SearchStrategy[tuple[frozenset[str], ...]]:
    """What ``drawn_wants`` reads: a set of labels per node id modulo 5 and destination."""
    table = st.one_of(st.just(frozenset(LABELS)), st.frozensets(st.sampled_from(LABELS)))
    return st.tuples(*[table] * (5 * len(DESTINATIONS)))


def drawn_wants(table: tuple[frozenset[str], ...]) -> Callable[[PosetNode, str], set[str]]:
    """A ``wants`` callable: per node and destination, the labels ``table`` gives for the node's
    id modulo 5 and the destination (the same answer each time it is asked)."""

    def wants(node: PosetNode, destination: str) -> set[str]:
        return set(table[node.id % 5 + 5 * DESTINATIONS.index(destination)])

    return wants
