"""The predicate index gives exactly ``qel.matches``'s answers, whatever was added and removed."""

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset.predicate_index import PredicateIndex, PredicateIndexStatistics
from qel import domains
from qel.filters import Filter, filter_within
from qel.terms import XSD_DATE, XSD_DECIMAL, XSD_DOUBLE, Literal, number
from tests.strategies import PREDICATES, SUBJECTS, publications, subscriptions, universe
from workloads.digital_library import DigitalLibrary

EX = "http://example.org/"
PREFIX = f"@prefix ex: <{EX}> .\n"
P = qel.URI(EX + "p")
Q = qel.URI(EX + "q")
A = qel.URI(EX + "a")
B = qel.URI(EX + "b")


def sub(text: str) -> qel.Subscription:
    return qel.parse_subscription(PREFIX + text)


def pub(*statements: tuple[qel.URI, qel.Term], subject: qel.URI = A) -> qel.Publication:
    return qel.Publication(subject, frozenset(statements))


def double(lexical: str) -> Literal:
    return Literal(lexical, XSD_DOUBLE)


def expected(subs: dict[object, qel.Subscription], publication: qel.Publication) -> set[object]:
    return {key for key, subscription in subs.items() if qel.matches(subscription, publication)}


def index_of(subs: dict[object, qel.Subscription]) -> PredicateIndex:
    index = PredicateIndex()
    for key, subscription in subs.items():
        index.add(key, subscription)
    return index


def assert_agrees(index, subs, publications_):
    for publication in publications_:
        assert index.match(publication) == expected(subs, publication)
    assert_radix(index)


def assert_radix(index: PredicateIndex) -> None:
    """Whatever was added and removed, the trie is a radix trie: every node but the root ends a
    filter or has two children or more (a run of nodes on one path is one node); and a node's
    filters of one key are a pair while there is one (a dictionary from two on)."""
    stack = list(index._root.children.values())
    while stack:
        node = stack.pop()
        assert node.one or node.ends or len(node.children) >= 2, "a node on one path only"
        assert type(node.one) is tuple or len(node.one) != 1, "one filter in a dictionary"
        stack.extend(node.children.values())


def assert_empty(statistics: PredicateIndexStatistics) -> None:
    counts = {
        name: getattr(statistics, name)
        for name in PredicateIndexStatistics.__dataclass_fields__
        if name != "approximate_bytes"
    }
    assert counts == dict.fromkeys(counts, 0)


# -- properties -------------------------------------------------------------------------------


@st.composite
def boundary_publications(draw, subs):
    """Publications built from the values that sit on and between the subscriptions' constants
    (``tests.strategies.universe``), with several objects per predicate."""
    choices = universe(*subs)
    subject = draw(st.sampled_from([*SUBJECTS, qel.URI(EX + "fresh-subject")]))
    statements = draw(
        st.lists(
            st.sampled_from(PREDICATES).flatmap(
                lambda p: st.tuples(st.just(p), st.sampled_from(choices[p]))
            ),
            min_size=1,
            max_size=6,
        )
    )
    return qel.Publication(subject, frozenset(statements))


@pytest.mark.slow
@settings(max_examples=150)
@given(
    st.lists(subscriptions(repeat_predicates=True), min_size=1, max_size=12),
    st.lists(publications(), min_size=1, max_size=4),
    st.data(),
)
def test_matches_brute_force_through_additions_and_removals(subs_list, pubs, data):
    subs = dict(enumerate(subs_list))
    index = index_of(subs)
    pubs = pubs + data.draw(st.lists(boundary_publications(subs_list), min_size=1, max_size=4))
    assert_agrees(index, subs, pubs)

    removed = data.draw(st.lists(st.sampled_from(sorted(subs)), unique=True))
    for key in removed:
        index.remove(key)
        del subs[key]
    assert len(index) == len(subs)
    assert_agrees(index, subs, pubs)

    # Re-adding under new keys between matches exercises the lazy rebuilds.
    for key in removed[: len(removed) // 2]:
        subs[("again", key)] = subs_list[key]
        index.add(("again", key), subs_list[key])
    assert_agrees(index, subs, pubs)

    for key in list(subs):
        index.remove(key)
    assert_empty(index.statistics())
    assert all(index.match(publication) == set() for publication in pubs)


@given(
    st.lists(subscriptions(max_patterns=2), min_size=1, max_size=10),
    st.lists(subscriptions(max_patterns=2), max_size=4),
    st.data(),
)
def test_keys_with_a_filter_are_those_holding_it_or_the_same_patterns_written_otherwise(
    subs_list, others, data
):
    subs = dict(enumerate(subs_list))
    index = index_of(subs)
    for key in data.draw(st.lists(st.sampled_from(sorted(subs)), unique=True)):
        index.remove(key)
        del subs[key]
    for probe in [f for s in [*subs_list, *others] for f in s.filters]:
        found = index.keys_with(probe)
        assert len(found) == len(set(found))
        holding = {key for key, s in subs.items() if probe in s.filters}
        assert holding <= set(found), "every key holding the very filter"
        for key in found:
            assert any(
                filter_within(probe, held) and filter_within(held, probe)
                for held in subs[key].filters
            ), "only keys holding an equivalent filter"


@settings(max_examples=60)
@given(
    st.lists(subscriptions(max_patterns=2), min_size=1, max_size=3),
    st.lists(st.tuples(st.booleans(), st.integers(0, 24)), max_size=120),
    st.lists(publications(), min_size=1, max_size=3),
    st.data(),
)
def test_keys_sharing_filters_go_from_one_to_a_tuple_to_a_set_and_back(forms, changes, pubs, data):
    """Many keys over a few filters: a filter's keys pass through every form (the key alone, a
    tuple, a set beyond ``_FEW_KEYS``) both ways, matches checked at every step. Odd keys are
    held by the caller (``hold``, ``release``), even ones kept by the index."""
    pubs = pubs + data.draw(st.lists(boundary_publications(forms), min_size=1, max_size=3))
    index = PredicateIndex()
    subs: dict[object, qel.Subscription] = {}
    for adding, key in changes:
        if adding and key not in subs:
            subs[key] = forms[key % len(forms)]
            if key % 2:
                index.hold(key, subs[key].filters)
            else:
                index.add(key, subs[key])
        elif not adding and key in subs:
            if key % 2:
                index.release(key, subs[key].filters)
            else:
                index.remove(key)
            del subs[key]
        assert_agrees(index, subs, pubs[:1])
        assert len(index) == sum(1 for key in subs if not key % 2)
    assert_agrees(index, subs, pubs)
    for key in list(subs):
        if key % 2:
            index.release(key, subs[key].filters)
        else:
            index.remove(key)
    assert_empty(index.statistics())


@pytest.mark.slow
def test_digital_library_workload_against_brute_force():
    library = DigitalLibrary(seed=3)
    texts = [library.subscription() for _ in range(3000)]
    parsed = {text: qel.parse_subscription(text) for text in set(texts)}
    subs = {f"s{number}": parsed[text] for number, text in enumerate(texts)}
    pubs = [
        publication
        for number in range(150)
        for publication in qel.parse_publications(library.turtle(library.document(number)))
    ]
    index = index_of(subs)
    answers = [index.match(publication) for publication in pubs]
    assert answers == [expected(subs, publication) for publication in pubs]
    assert sum(map(len, answers)) > 10 * len(pubs)  # the workload really matches

    for key in list(subs)[::3]:
        index.remove(key)
        del subs[key]
    assert_agrees(index, subs, pubs[:50])
    statistics = index.statistics()
    assert statistics.subscriptions == len(subs)
    assert statistics.filters < statistics.subscriptions  # equal filters are shared


# -- values, patterns and filters -------------------------------------------------------------


def test_a_pattern_holds_when_any_of_several_values_satisfies_it():
    subs = {
        "equal": sub('X : t(X, ex:p, V), V = "second"'),
        "contains": sub('X : t(X, ex:p, V), V contains "cond"'),
        "range": sub("X : t(X, ex:p, V), V > 5"),
    }
    index = index_of(subs)
    many = pub((P, Literal("first")), (P, Literal("second")), (P, number(1)), (P, number(10)))
    assert index.match(many) == {"equal", "contains", "range"}
    assert index.match(pub((P, Literal("first")), (P, number(1)))) == set()


def test_a_predicate_repeated_in_one_filter_needs_each_pattern_satisfied():
    index = index_of({"both": sub("X : t(X, ex:p, V), t(X, ex:p, W), V = 1, W = 2")})
    assert index.match(pub((P, number(1)), (P, number(2)))) == {"both"}
    assert index.match(pub((P, number(1)))) == set()
    assert index.match(pub((P, number(2)), (Q, number(1)))) == set()


def test_contains_needs_all_substrings_in_the_same_value():
    index = index_of({"ab-cd": sub('X : t(X, ex:p, V), V contains "ab", V contains "cd"')})
    assert index.match(pub((P, Literal("ab")), (P, Literal("cd")))) == set()
    assert index.match(pub((P, Literal("ab")), (P, Literal("xcdab")))) == {"ab-cd"}
    assert index.match(pub((P, Literal("abab ab")))) == set()  # repeats count once
    assert index.match(pub((Q, Literal("abcd")))) == set()


def test_contains_only_admits_string_literals_and_empty_contains_admits_every_string():
    subs = {
        "word": sub('X : t(X, ex:p, V), V contains "12"'),
        "any-string": sub('X : t(X, ex:p, V), V contains ""'),
    }
    index = index_of(subs)
    assert index.match(pub((P, number(12)), (P, qel.URI(EX + "12")))) == set()
    assert index.match(pub((P, Literal("", None, "en")))) == {"any-string"}
    assert index.match(pub((P, Literal("a12b", None, "de")))) == {"word", "any-string"}


def test_overlapping_ranges_with_open_and_closed_bounds():
    subs = {
        "[1,3]": sub("X : t(X, ex:p, V), V >= 1, V <= 3"),
        "(1,3)": sub("X : t(X, ex:p, V), V > 1, V < 3"),
        "[2,5)": sub("X : t(X, ex:p, V), V >= 2, V < 5"),
        ">3": sub("X : t(X, ex:p, V), V > 3"),
        "<=1": sub("X : t(X, ex:p, V), V <= 1"),
        "=3": sub("X : t(X, ex:p, V), V = 3"),
        "1.5-2.5": sub("X : t(X, ex:p, V), V >= 1.5, V <= 2.5"),
    }
    index = index_of(subs)
    values = [0, 1, Fraction(3, 2), 2, Fraction(5, 2), 3, 4, 5, 6]
    for value in values:
        publication = pub((P, number(value)))
        assert index.match(publication) == expected(subs, publication), value
    assert index.match(pub((P, number(1)))) == {"[1,3]", "<=1"}
    assert index.match(pub((P, number(3)))) == {"[1,3]", "[2,5)", "=3"}
    assert index.match(pub((P, Literal("3.0", XSD_DECIMAL)))) == {"[1,3]", "[2,5)", "=3"}
    assert index.match(pub((P, double("2.5")))) == {"[1,3]", "(1,3)", "[2,5)", "1.5-2.5"}
    assert index.statistics().ranges == 6  # the point V = 3 is an equality entry
    assert index.statistics().hash_entries == 1


def test_ranges_only_admit_their_own_kind():
    subs = {
        "number": sub("X : t(X, ex:p, V), V >= 2004"),
        "date": sub("X : t(X, ex:p, V), V >= 2004-01-01"),
        "number-point": sub("X : t(X, ex:p, V), V = 2004"),
    }
    index = index_of(subs)
    assert index.match(pub((P, number(2004)))) == {"number", "number-point"}
    assert index.match(pub((P, Literal("2004-06-01", XSD_DATE)))) == {"date"}
    assert index.match(pub((P, Literal("2004")))) == set()


def test_infinities_and_nan():
    subs = {
        "above": sub("X : t(X, ex:p, V), V > 5"),
        "below": sub("X : t(X, ex:p, V), V < 5"),
        "between": sub("X : t(X, ex:p, V), V > 0, V < 10"),
        "present": sub("X : t(X, ex:p, V)"),
    }
    index = index_of(subs)
    assert index.match(pub((P, double("INF")))) == {"above", "present"}
    assert index.match(pub((P, double("-INF")))) == {"below", "present"}
    assert index.match(pub((P, double("NaN")))) == {"present"}
    assert index.match(pub((P, double("NaN")), (P, double("7.5")))) == {
        "above",
        "between",
        "present",
    }


def with_filters(subscription: qel.Subscription, *filters: Filter) -> qel.Subscription:
    """A subscription whose compiled form is ``filters``: domains the parser never produces on its
    own (an unbounded range) still have to be indexed as ``RangeDomain.admits`` defines them."""
    object.__setattr__(subscription, "filters", filters)
    return subscription


def test_a_range_unbounded_at_both_ends_admits_every_value_of_its_kind_nan_included():
    unbounded = with_filters(
        sub("X : t(X, ex:p, V), V > 0"), Filter(domains.ANY, ((P, domains.RangeDomain("number")),))
    )
    subs = {"numbers": unbounded}
    index = index_of(subs)
    for term in (double("NaN"), double("-INF"), number(-3), Literal("3"), qel.URI(EX + "x")):
        publication = pub((P, term))
        assert index.match(publication) == expected(subs, publication), term
    assert index.match(pub((P, double("NaN")))) == {"numbers"}


def test_subject_constraints():
    subs = {
        "a": sub("X : t(X, ex:p, V), X = ex:a"),
        "a-or-b": sub("X : t(X, ex:p, V), (X = ex:a ; X = ex:b)"),
        "b-with-1": sub("X : t(X, ex:p, V), X = ex:b, V = 1"),
        "anyone": sub("X : t(X, ex:p, V)"),
    }
    index = index_of(subs)
    assert index.match(pub((P, number(1)), subject=A)) == {"a", "a-or-b", "anyone"}
    assert index.match(pub((P, number(1)), subject=B)) == {"a-or-b", "b-with-1", "anyone"}
    assert index.match(pub((P, number(2)), subject=B)) == {"a-or-b", "anyone"}
    assert index.match(pub((Q, number(1)), subject=A)) == set()


def test_equal_subscriptions_and_equal_filters_are_stored_once():
    first = sub('X : t(X, ex:p, V), V = "x"')
    renamed = sub('Z : t(Z, ex:p, W), W = "x"')
    index = index_of({1: first, 2: renamed, 3: sub('X : t(X, ex:p, V), (V = "x" ; V = "y")')})
    assert index.statistics().filters == 2
    assert index.statistics().hash_entries == 2
    assert index.match(pub((P, Literal("x")))) == {1, 2, 3}
    assert index.match(pub((P, Literal("y")))) == {3}


def test_filters_the_index_does_not_tell_apart_hold_the_key_once():
    """Filters of one key that the index stores as the same patterns (equal ones, or ranges
    that ``chains._loosened`` opened alike) hold it once: removing the key leaves nothing
    behind (it was held twice, and the removal raised)."""
    low = sub("X : t(X, ex:p, V), V >= 5").filters[0]
    high = sub("X : t(X, ex:p, V), V <= 9").filters[0]
    opened = [_opened(low), _opened(high)]
    assert opened[0] == opened[1]
    index = PredicateIndex()
    index.add_filters("k", opened)
    assert index.statistics().filters == 1
    assert index.match(pub((P, number(5)))) == {"k"}
    index.remove("k")
    assert_empty(index.statistics())
    index.add_filters("k", opened)
    index.add_filters("other", opened[:1])
    index.remove("k")
    assert index.match(pub((P, number(5)))) == {"other"}


def _opened(compiled: Filter) -> Filter:
    return Filter(
        compiled.subject,
        tuple((p, domains.RangeDomain(d.kind)) for p, d in compiled.patterns),  # type: ignore[union-attr]
    )


# -- lifecycle --------------------------------------------------------------------------------


def test_add_remove_and_re_add():
    index = PredicateIndex()
    subscription = sub('X : t(X, ex:p, V), V contains "b"')
    index.add("k", subscription)
    assert "k" in index and len(index) == 1
    with pytest.raises(KeyError, match="already"):
        index.add("k", subscription)
    with pytest.raises(KeyError, match="not in"):
        index.remove("other")
    with pytest.raises(TypeError):
        index.add("text", "X : t(X, ex:p, V)")
    assert "text" not in index
    match = pub((P, Literal("abc")))
    assert index.match(match) == {"k"}
    index.remove("k")
    assert "k" not in index and len(index) == 0
    assert index.match(match) == set()
    with pytest.raises(KeyError):
        index.remove("k")
    index.add("k", sub('X : t(X, ex:p, V), V contains "c"'))
    assert index.match(match) == {"k"}
    assert index.match(pub((P, Literal("ab")))) == set()


def test_removing_everything_empties_every_structure_and_cycles_do_not_grow():
    library = DigitalLibrary(seed=5)
    subs = {number: qel.parse_subscription(library.subscription()) for number in range(300)}
    subs["subject"] = sub("X : t(X, ex:p, V), X = ex:a, V >= 2004-01-01")
    subs["contains-two"] = sub('X : t(X, ex:p, V), V contains "ab", V contains "cd"')
    subs["present"] = sub('X : t(X, ex:p, V), t(X, ex:q, W), W contains ""')
    publication = qel.parse_publications(library.turtle(library.document(0)))[0]
    index = PredicateIndex()
    sizes = []
    for _ in range(3):
        for key, subscription in subs.items():
            index.add(key, subscription)
        full = index.statistics()
        assert full.subscriptions == len(subs)
        assert min(full.hash_entries, full.ranges, full.substrings, full.presence) > 0
        assert index.match(publication) == expected(subs, publication)
        for key in subs:
            index.remove(key)
        emptied = index.statistics()
        assert_empty(emptied)
        assert index.match(publication) == set()
        sizes.append(emptied.approximate_bytes)
    assert sizes[2] <= sizes[1]


def test_changes_interleaved_with_matches_keep_answers_exact_and_levels_logarithmic():
    rng = random.Random(4)
    probes = [
        pub((P, number(rng.randint(0, 1200))), (Q, Literal("".join(rng.choices("abc", k=12)))))
        for _ in range(40)
    ]
    subs = {}
    index = PredicateIndex()
    for number_ in range(300):
        low = rng.randint(0, 1000)
        high = low + rng.randint(1, 200)
        word = "".join(rng.choices("abc", k=3))
        subs[number_] = sub(
            f'X : t(X, ex:p, V), t(X, ex:q, T), V >= {low}, V < {high}, T contains "{word}"'
        )
        index.add(number_, subs[number_])
        index.match(probes[number_ % len(probes)])  # each match builds the latest changes
        if number_ % 60 == 59:
            assert_agrees(index, subs, probes)
    statistics = index.statistics()
    assert statistics.ranges == 300
    # One stack of range trees and one of automata, each at most log2(n) + 1 deep.
    assert 2 < statistics.levels <= (math.log2(300) + 1) + (math.log2(27) + 1)

    order = list(subs)
    rng.shuffle(order)
    for position, key in enumerate(order):
        index.remove(key)
        del subs[key]
        index.match(probes[position % len(probes)])
        statistics = index.statistics()
        # Removed items linger in the levels only until they outnumber the live ones.
        assert statistics.stale <= statistics.ranges + statistics.substrings
        if position % 60 == 59:
            assert_agrees(index, subs, probes)
    assert_empty(index.statistics())
