"""What the poset's placement relies on: its shortcut of ``qel.covers``, and the chain decomposition
(every node in one chain, each chain ordered by covering, ranks increasing down it), after random
insertions and removals, with the lookups that use it checked against brute force."""

import itertools
from contextlib import contextmanager

from hypothesis import assume, given, settings
from hypothesis import strategies as st

import qel
from poset import chains as chains_module
from poset import poset as poset_module
from poset import witness_index as witness_module
from poset.chains import Probe, _hull, _loosened, _within_ranges
from poset.families import signature
from poset.poset import SubscriptionPoset, _above_by_ancestors, _covers, _covers_signed
from poset.witness_index import Sample, WitnessIndex
from qel.domains import ContainsDomain, RangeDomain
from qel.filters import witness
from qel.matching import filter_matches
from tests.strategies import publications, subscriptions


@settings(max_examples=300)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_the_placement_covering_test_is_qel_covers(general, specific):
    assert _covers(general, specific) == qel.covers(general, specific)
    signed = Probe(general, _covers_signed), Probe(specific, _covers_signed)
    assert _covers_signed(*signed) == qel.covers(general, specific)


def placed_then_removed(entries: list) -> SubscriptionPoset:
    """A poset of every ``(subscription, removed)`` entry, then those marked removed taken out."""
    poset = SubscriptionPoset()
    for number, (subscription, _) in enumerate(entries):
        poset.insert(subscription, "peer", str(number))
    for number, (_, removed) in enumerate(entries):
        if removed:
            poset.remove("peer", str(number))
    return poset


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(subscriptions(max_patterns=2), st.booleans()), min_size=1, max_size=16),
    subscriptions(max_patterns=2),
)
def test_chains_partition_the_nodes_in_covering_order(entries, probe):
    poset = placed_then_removed(entries)
    chains = {id(node.chain): node.chain for node in poset}
    assert sorted(n.id for chain in chains.values() for n in chain.nodes) == [n.id for n in poset]
    for chain in chains.values():
        assert chain.ranks == sorted(set(chain.ranks))
        assert [n.rank for n in chain.nodes] == chain.ranks
        for upper, lower in zip(chain.nodes, chain.nodes[1:], strict=False):
            assert qel.covers(upper.subscription, lower.subscription)
    nodes = list(poset)
    assert [n.id for n in poset.covering(probe)] == [
        n.id for n in nodes if qel.covers(n.subscription, probe)
    ]
    assert [n.id for n in poset.covered(probe)] == [
        n.id for n in nodes if qel.covers(probe, n.subscription)
    ]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(subscriptions(max_patterns=2, max_disjuncts=3), st.booleans()),
        min_size=2,
        max_size=16,
    ),
    st.integers(0, 16),
)
def test_above_by_ancestors_is_strict_covering(entries, walked):
    """The Hasse diagram read upward (``_above_by_ancestors``, at any bound on the ancestors
    walked) answers as ``qel.covers`` one way and not the other, for every pair of nodes."""
    poset = SubscriptionPoset()
    for number, (subscription, _) in enumerate(entries):
        poset.insert(subscription, "peer", str(number))
    for number, (_, removed) in enumerate(entries):
        if removed and len(poset) > 1:
            poset.remove("peer", str(number))
    ancestors: dict = {}
    with _walking_at_most(walked):
        for general, specific in itertools.permutations(poset, 2):
            expected = qel.covers(general.subscription, specific.subscription)
            assert _above_by_ancestors(general, specific, ancestors) == expected


@contextmanager
def _patched(module, name, value):
    kept = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, kept)


def _walking_at_most(walked):
    return _patched(poset_module, "_ANCESTORS_WALKED", walked)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(subscriptions(max_patterns=3, repeat_predicates=True), min_size=1, max_size=12),
    st.sets(st.integers(0, 11)),
    subscriptions(max_patterns=3, repeat_predicates=True),
    st.booleans(),
)
def test_witness_index_candidates_are_the_witnesses_the_probe_matches(
    entries, gone, probe, tagless
):
    """Keys tagged with their family (``WitnessIndex.groups``) or not: the candidates, among
    the groups the probe may match or not, include every witness it matches."""
    index = WitnessIndex()
    tags = [None if tagless else signature(subscription)[0] for subscription in entries]
    for key, subscription in enumerate(entries):
        index.add(key, subscription, tags[key])
    for key in gone:
        if key < len(entries):
            index.remove(key, tags[key])
    live = {k: s for k, s in enumerate(entries) if k not in gone}
    expected = {k for k, s in live.items() if qel.matches(probe, witness(s.filters[0]))}
    assert index.covered_candidates(probe) == expected
    assert expected >= {k for k, s in live.items() if qel.covers(probe, s)}
    assert index.rough_candidates(probe) >= expected
    among = [index.groups(compiled, None) for compiled in probe.filters]
    assert index.rough_candidates(probe, among) >= expected
    strings: dict = {}  # what a ``contains`` look-up counts (``size``): the live strings
    for subscription in live.values():
        for predicate, objects in witness(subscription.filters[0]).values.items():
            distinct = {(kind, value) for kind, value in objects if kind == "string"}
            strings[predicate] = strings.get(predicate, 0) + len(distinct)
    assert {p: held.strings for p, held in index._predicates.items()} == {
        p: strings.get(p, 0) for p in index._predicates
    }


@settings(max_examples=300, deadline=None)
@given(
    st.lists(subscriptions(max_patterns=3, repeat_predicates=True), min_size=1, max_size=12),
    subscriptions(max_patterns=3, repeat_predicates=True),
    st.integers(0, 4),
    st.sampled_from([0, 1, 4]),
)
def test_rough_candidates_hold_what_the_probe_may_match_and_no_witness_it_cannot(
    entries, probe, few, worth
):
    """At any ``_FEW`` and ``_WORTH`` (when the intersections stop, which ranges are
    looked up), the candidates include every witness the probe matches, and a filter's, when
    more than ``_FEW`` are left, none whose witness lacks a predicate of the filter (a pattern
    not looked up still keeps the keys with an object on its predicate)."""
    index = WitnessIndex()
    for key, subscription in enumerate(entries):
        index.add(key, subscription)
    witnesses = {key: witness(s.filters[0]) for key, s in enumerate(entries)}
    expected = {k for k, sample in witnesses.items() if qel.matches(probe, sample)}
    kept = witness_module._FEW, witness_module._WORTH
    witness_module._FEW, witness_module._WORTH = few, worth
    try:
        found = index.rough_candidates(probe)
        per_filter = [index._intersected(compiled, None) for compiled in probe.filters]
    finally:
        witness_module._FEW, witness_module._WORTH = kept
    assert found >= expected
    for compiled, candidates in zip(probe.filters, per_filter, strict=True):
        if len(candidates) > few:
            assert all(compiled.predicates <= witnesses[k].values.keys() for k in candidates)


@settings(max_examples=300)
@given(
    st.lists(st.tuples(st.sampled_from(["string", "uri"]), st.text("abc", max_size=4))),
    st.lists(st.text("abc", min_size=1, max_size=2), max_size=3),
)
def test_a_contains_look_up_gives_the_strings_that_hold_every_substring(objects, parts):
    """The scan of one predicate's strings for a ``contains`` (one substring written out,
    several, none) gives the keys ``admits`` gives."""
    held = witness_module._PredicateWitnesses()
    for key, (kind, value) in enumerate(objects):
        held.add(key, kind, value)
    domain = ContainsDomain(tuple(sorted(set(parts))))
    expected = sorted(k for k, (kind, value) in enumerate(objects) if domain.admits(kind, value))
    assert sorted(held.candidates(domain)) == expected


def test_a_range_not_looked_up_still_keeps_the_keys_with_its_predicate():
    """A range too broad to look up (``_WORTH``) leaves out the witnesses without its
    predicate: on the shapes, more than half the candidates of a search for the chain bottoms a
    probe covers lacked a predicate of its filters."""

    def sub(constraint: str, predicates: str) -> qel.Subscription:
        triples = ", ".join(f"t(X, ex:{name}, {name.upper()})" for name in predicates)
        return qel.parse_subscription(
            f"@prefix ex: <http://example.org/> .\nX : {triples}, {constraint}"
        )

    index = WitnessIndex()
    stored = [("A = 5", "a"), ("A = 5, B = 5", "ab"), ("B = 7", "b"), ("B = 8", "b")]
    for key, (constraint, predicates) in enumerate(stored):
        index.add(key, sub(constraint, predicates))
    probe = sub("A = 5, B >= 1", "ab")
    kept = witness_module._FEW, witness_module._WORTH
    witness_module._FEW, witness_module._WORTH = 0, 1
    try:
        assert index.rough_candidates(probe) == {1} == index.covered_candidates(probe)
    finally:
        witness_module._FEW, witness_module._WORTH = kept


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(subscriptions(max_patterns=2), st.booleans(), st.booleans()),
        min_size=1,
        max_size=16,
    ),
    subscriptions(max_patterns=2),
)
def test_groups_kept_up_to_date_are_the_groups(steps, probe):
    """Groups asked once, then extended by ``groups_since`` after each change (adds, and
    removals that empty groups, which come back as new ones), hold the same keys as ``groups``
    asked again; whenever ``groups_since`` no longer knows, asking ``groups`` again is right."""
    index = WitnessIndex()
    compiled = probe.filters[0]
    skip = signature(probe)[0]
    version, held = index.version, index.groups(compiled, skip)
    live: list[int] = []
    for key, (subscription, tagged, drop) in enumerate(steps):
        index.add(key, subscription, signature(subscription)[0] if tagged else None)
        live.append(key)
        if drop and len(live) > 1:
            gone = live.pop(0)
            tag = signature(steps[gone][0])[0] if steps[gone][1] else None
            index.remove(gone, tag)
        added = index.groups_since(version, compiled, skip)
        if added is None:
            held = index.groups(compiled, skip)
        else:
            held += added
        version = index.version
        assert sorted(sorted(k) for k in held if k) == sorted(
            sorted(k) for k in index.groups(compiled, skip)
        )


def test_witness_index_ranges_at_the_witnesses_own_values():
    def sub(constraint: str) -> qel.Subscription:
        return qel.parse_subscription(
            f"@prefix ex: <http://example.org/> .\nX : t(X, ex:p, P), {constraint}"
        )

    stored = ["P >= 2", "P <= 2", "P = 2", "P >= 1", "P <= 3", "P > 1, P < 3"]
    index = WitnessIndex()
    for key, constraint in enumerate(stored):
        index.add(key, sub(constraint))
    for constraint in ["P > 2", "P < 2", "P >= 2", "P <= 2", "P > 1", "P < 3", "P >= 1, P <= 3"]:
        probe = sub(constraint)
        expected = {
            key
            for key, text in enumerate(stored)
            if qel.matches(probe, witness(sub(text).filters[0]))
        }
        assert index.covered_candidates(probe) == expected, constraint


@settings(max_examples=200, deadline=None)
@given(
    st.lists(publications(), min_size=1, max_size=6),
    st.lists(subscriptions(max_patterns=3, repeat_predicates=True), min_size=1, max_size=4),
)
def test_a_sample_matches_as_its_publication_does(samples, filters_of):
    """What the witness index keeps of a witness (``Sample``, its objects of one predicate
    shared with other samples' when they are neither numbers nor dates) matches every filter
    as the publication does; equal shared objects are one tuple."""
    kept = [Sample(publication) for publication in samples]
    for subscription in filters_of:
        for compiled in subscription.filters:
            for publication, sample in zip(samples, kept, strict=True):
                assert filter_matches(compiled, sample) == filter_matches(compiled, publication)  # type: ignore[arg-type]
    for first, second in itertools.combinations(kept, 2):
        for predicate, objects in first.values.items():
            other = second.values.get(predicate)
            if other == objects and all(kind not in ("number", "date") for kind, _ in objects):
                assert other is objects


@st.composite
def _ranged(draw):
    """A subscription of one or two patterns on ``ex:p`` and ``ex:q`` (a predicate may repeat)
    under a DNF of comparisons with small integers: ranges that overlap, nest and share ends,
    so that a loosened top often matches a witness that the top does not."""
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
    prefix = "@prefix ex: <http://example.org/> .\n"
    try:
        return qel.parse_subscription(f"{prefix}X : {patterns}{constraint}")
    except qel.QueryError:
        return qel.parse_subscription(f"{prefix}X : {patterns}")


_TOPS = st.one_of(subscriptions(max_patterns=3, repeat_predicates=True, max_disjuncts=3), _ranged())


@settings(max_examples=300, deadline=None)
@given(_TOPS, publications())
def test_a_loosened_filter_holds_every_publication_of_the_filter(subscription, publication):
    """The index of chain tops holds each top loosened (``chains._loosened``): a superset, so
    its look-up misses no top that matches; the filter itself when no range is opened."""
    for compiled in subscription.filters:
        loosened = _loosened(compiled)
        if filter_matches(compiled, publication):
            assert filter_matches(loosened, publication)
        opened = any(
            type(domain) is RangeDomain and not domain.is_point for _, domain in compiled.patterns
        )
        assert (loosened is compiled) == (not opened)
        assert loosened.predicates == compiled.predicates


@settings(max_examples=1000, deadline=None)
@given(_TOPS, st.one_of(publications(), _TOPS.map(lambda s: witness(s.filters[-1]))))
def test_a_filter_whose_loosened_form_matches_matches_iff_its_ranges_admit(subscription, sample):
    """``chains._within_ranges``: once the loosened filter matches a publication, the filter
    does iff each of its ranges admits an object of its predicate (``filter_matches`` decides)."""
    for compiled in subscription.filters:
        if filter_matches(_loosened(compiled), sample):
            assert _within_ranges(compiled, sample) == filter_matches(compiled, sample)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_TOPS, st.booleans()), min_size=1, max_size=16),
    _TOPS,
    st.booleans(),
)
def test_top_candidates_are_the_tops_and_hulls_matching_every_witness(entries, probe, skipping):
    """Through insertions and removals, ``_top_candidates`` gives the chains of no family whose
    top matches every witness of the probe, and every chain of each family whose hull matches
    every witness but the family skipped (brute force; one index holds tops and hulls); the
    chains held loosened are those whose top has a range opened."""
    poset = placed_then_removed(entries)
    decomposition = poset._chains
    placed = Probe(probe, _covers_signed)
    families = decomposition._families
    skip = next(iter(families), None) if skipping else None
    found = decomposition._top_candidates(placed, skip)
    free = {i: c for i, c in decomposition._chains.items() if c.family is None}
    assert {i for i in found if i in free} == {
        i
        for i, chain in free.items()
        if all(qel.matches(chain.nodes[0].subscription, w) for w in placed.witnesses)
    }
    hulls = {
        family: [_hull(f) for f in next(iter(chains.values())).nodes[0].subscription.filters]
        for family, chains in families.items()
    }
    assert {i for i in found if i not in free} == {
        i
        for family, chains in families.items()
        if family is not skip
        and all(any(filter_matches(h, w) for h in hulls[family]) for w in placed.witnesses)
        for i in chains
    }
    assert decomposition._loose == {
        i
        for i, chain in free.items()
        if any(_loosened(f) is not f for f in chain.nodes[0].subscription.filters)
    }


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_TOPS, st.booleans()), min_size=1, max_size=16),
    _TOPS,
    st.sampled_from([(0, 1), (0, 1_000), (2, 4), (1_000, 4)]),
)
def test_highest_covered_finds_every_chain_holding_a_covered_node(entries, probe, asking):
    """Through insertions and removals, ``highest_covered`` gives, for each chain holding a node
    the probe covers, the highest such node (brute force over every chain), whether the
    witnesses of the candidate bottoms are asked of always, never past the first, or while
    they refuse some (``_ADMITS_ASKED``, ``_ADMITS_REFUSING``): they only spare tests."""
    poset = placed_then_removed(entries)
    decomposition = poset._chains
    placed = Probe(probe, _covers_signed)
    first, share = asking
    with (
        _patched(chains_module, "_ADMITS_ASKED", first),
        _patched(chains_module, "_ADMITS_REFUSING", share),
    ):
        found = decomposition.highest_covered(placed, decomposition.bottom_candidates(placed))
    assert [(chain.id, index) for chain, index in found] == [
        (chain.id, min(i for i, n in enumerate(chain.nodes) if qel.covers(probe, n.subscription)))
        for chain_id, chain in sorted(decomposition._chains.items())
        if any(qel.covers(probe, n.subscription) for n in chain.nodes)
    ]


@settings(max_examples=3_000, deadline=None)
@given(
    subscriptions(max_patterns=4, repeat_predicates=True, max_disjuncts=1),
    subscriptions(max_patterns=4, repeat_predicates=True, max_disjuncts=3),
)
def test_one_filter_covers_what_it_holds_a_pattern_of_each_of_its_patterns_in(general, specific):
    """Against a subscription of one filter, ``_covers`` answers by ``filter_within`` alone,
    whether predicates repeat or not: the cell search of ``qel.covers`` (exact) agrees."""
    assume(len(general.filters) == 1)
    assert _covers(general, specific) == qel.covers(general, specific, budget=10**6)
