"""``covers``: examples, then soundness, completeness (against a brute-force oracle over a universe of
publications that reaches every case the constants can distinguish), reflexivity, transitivity."""

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from qel.covering import (
    DEFAULT_BUDGET,
    Target,
    _along_one_predicate,
    _CellSearch,
    _corner_refutes,
    _escape_refutes,
    filter_covered,
)
from tests.strategies import atoms_for, small_publications, subscriptions, universe

DC = "@prefix ex: <http://example.org/> .\n"


def q(text: str) -> qel.Subscription:
    return qel.parse_subscription(DC + text)


def oracle_covers(general: qel.Subscription, specific: qel.Subscription) -> bool:
    choices = universe(general, specific)
    # One object per pattern: a predicate repeated n times in a filter gets n objects.
    counts: dict = {}
    for compiled in specific.filters:
        for predicate in compiled.predicates:
            n = sum(1 for p, _ in compiled.patterns if p == predicate)
            counts[predicate] = max(counts.get(predicate, 0), n)
    predicates = sorted((p for p, n in counts.items() for _ in range(n)), key=lambda u: u.value)
    for publication in small_publications(predicates, choices):
        if qel.matches(specific, publication) and not qel.matches(general, publication):
            return False
    return True


@pytest.mark.parametrize(
    ("general", "specific"),
    [
        ("X : t(X, dc:date, D), D >= 2000", "X : t(X, dc:date, D), D = 2004"),
        ("X : t(X, dc:date, D), D > 2000", "X : t(X, dc:date, D), D > 2000, D < 2010"),
        ('X : t(X, dc:creator, Y), Y contains "Ne"', 'X : t(X, dc:creator, Y), Y contains "Nejdl"'),
        ('X : t(X, dc:creator, Y), Y contains "dl"', 'X : t(X, dc:creator, Y), Y = "Nejdl"'),
        ("X : t(X, dc:creator, Y)", 'X : t(X, dc:creator, Y), t(X, dc:title, T), T = "A"'),
        ("X : t(X, rdf:type, C)", "X : t(X, rdf:type, dc:article)"),
        ("X : t(X, dc:creator, Y)", 'X : t(X, dc:creator, "Nejdl")'),
        # A union covers what no single alternative does.
        (
            "X : t(X, dc:date, D), (D <= 2004 ; D > 2004)",
            "X : t(X, dc:date, D), D >= 1990",
        ),
        (
            "X : t(X, dc:date, D), (D >= 2000, D <= 2004 ; D > 2004, D <= 2010)",
            "X : t(X, dc:date, D), D >= 2001, D < 2009",
        ),
        (
            'X : t(X, dc:date, D), t(X, dc:creator, Y), (D < 5 ; Y contains "a" ; D >= 5)',
            'X : t(X, dc:date, D), t(X, dc:creator, Y), Y contains "b", D >= 0',
        ),
        ("X : t(X, dc:date, D), D != 3", "X : t(X, dc:date, D), D > 3"),
        ("X : t(X, ex:on, W), W >= 2004-01-01", "X : t(X, ex:on, W), W = 2004-06-01T10:00:00Z"),
    ],
)
def test_covers_examples(general, specific):
    assert qel.covers(q(general), q(specific))


@pytest.mark.parametrize(
    ("general", "specific"),
    [
        ("X : t(X, dc:date, D), D = 2004", "X : t(X, dc:date, D), D >= 2000"),
        # Over the reals (decimals are numbers too) > 2003 is not >= 2004.
        ("X : t(X, dc:date, D), D >= 2004", "X : t(X, dc:date, D), D > 2003"),
        # An unbounded range includes xsd:double's INF.
        ("X : t(X, dc:date, D), D > 0, D < 1E300", "X : t(X, dc:date, D), D > 0"),
        (
            'X : t(X, dc:creator, Y), Y contains "ab"',
            'X : t(X, dc:creator, Y), Y contains "a", Y contains "b"',
        ),
        ('X : t(X, dc:creator, Y), Y = "Nejdl"', 'X : t(X, dc:creator, Y), Y contains "Nejdl"'),
        ("X : t(X, dc:creator, Y), t(X, dc:title, T)", "X : t(X, dc:creator, Y)"),
        ("X : t(X, rdf:type, dc:article)", "X : t(X, rdf:type, C)"),
        # An unconstrained object may be a URI, a string, anything: no typed constraint covers it.
        ('X : t(X, dc:creator, Y), Y contains ""', "X : t(X, dc:creator, Y)"),
        ("X : t(X, dc:date, D), (D < 2004 ; D > 2004)", "X : t(X, dc:date, D), D >= 2000"),
        ("X : t(X, dc:creator, Y), X = ex:a", "X : t(X, dc:creator, Y)"),
    ],
)
def test_does_not_cover_examples(general, specific):
    assert not qel.covers(q(general), q(specific))


def test_repeated_predicates_are_handled_exactly():
    # Two creators, one containing "a" and one containing "b", vs one containing both.
    two = q('X : t(X, dc:creator, A), t(X, dc:creator, B), A contains "a", B contains "b"')
    one = q('X : t(X, dc:creator, A), A contains "a", A contains "b"')
    assert qel.covers(two, one)
    assert not qel.covers(one, two)


@settings(max_examples=300)
@given(subscriptions(), subscriptions())
def test_covers_agrees_with_the_brute_force_oracle_without_repeated_predicates(general, specific):
    result = qel.covers(general, specific)
    event(f"covers={result}")
    assert result == oracle_covers(general, specific)


@settings(max_examples=200)
@given(
    subscriptions(repeat_predicates=True, max_patterns=3),
    subscriptions(repeat_predicates=True, max_patterns=3),
)
def test_covers_agrees_with_the_oracle_with_repeated_predicates(general, specific):
    result = qel.covers(general, specific)
    event(f"covers={result}")
    assert result == oracle_covers(general, specific)


@given(subscriptions(repeat_predicates=True))
def test_covers_is_reflexive(subscription):
    assert qel.covers(subscription, subscription)


@settings(max_examples=300)
@given(subscriptions(max_patterns=2), subscriptions(max_patterns=2), subscriptions(max_patterns=2))
def test_covers_is_transitive(a, b, c):
    if qel.covers(a, b) and qel.covers(b, c):
        assert qel.covers(a, c)


def test_search_budget_exhaustion_answers_does_not_cover():
    wide = q(
        "X : t(X, dc:a, A), t(X, dc:b, B), t(X, dc:c, C), "
        "(A < 1 ; A >= 1), (B < 1 ; B >= 1), (C < 1 ; C >= 1)"
    )
    narrow = q("X : t(X, dc:a, A), t(X, dc:b, B), t(X, dc:c, C), A > 0, B > 0, C > 0")
    assert qel.covers(wide, narrow)
    assert not qel.covers(wide, narrow, budget=3)


@pytest.mark.parametrize(
    ("general", "specific"),
    [
        # both ends excluded: the corners are undecided, the middle (5.5) is in no alternative
        ("X : t(X, ex:p, P), (P <= 2 ; P >= 9)", "X : t(X, ex:p, P), P > 1, P < 10"),
        # a date range unbounded above: its upper corner is undecided
        (
            "X : t(X, ex:d, D), (D < 2000-01-01 ; D > 2030-01-01)",
            "X : t(X, ex:d, D), D > 2000-06-01",
        ),
        # contains has no corner: the middle holds "a" and nothing else
        (
            'X : t(X, ex:t, T), (T contains "a", T contains "b" ; T = "a")',
            'X : t(X, ex:t, T), T contains "a"',
        ),
    ],
)
def test_the_middle_of_the_target_refutes_before_the_search(general, specific):
    candidates = list(q(general).filters)
    (target,) = q(specific).filters
    assert _corner_refutes(Target(target), candidates)
    assert not qel.covers(q(general), q(specific))


def test_a_point_mixing_corners_refutes_before_the_search():
    general = q("X : t(X, ex:m, M), t(X, ex:c, C), (M <= 50 ; C >= 11, C < 14)")
    specific = q("X : t(X, ex:m, M), t(X, ex:c, C), M <= 100, C < 13")
    candidates = list(general.filters)
    (target,) = specific.filters
    assert not _corner_refutes(Target(target), candidates)  # M = 100, C = 12 is in the second
    assert _escape_refutes(
        Target(target), candidates
    )  # M = 100 escapes the first, C = -inf the second
    assert not qel.covers(general, specific)


@settings(max_examples=300)
@given(subscriptions(), subscriptions())
def test_an_escaping_point_refutes_only_what_does_not_cover(general, specific):
    """``_escape_refutes`` is sound: whenever it finds its point, the oracle finds a
    counterexample too (completeness is the search's, tested above through ``covers``)."""
    usable = [
        (target, [h for h in general.filters if h.predicates <= target.predicates])
        for target in specific.filters
    ]
    refuted = any(
        _escape_refutes(Target(target), candidates) for target, candidates in usable if candidates
    )
    event(f"escape refutes={refuted}")
    if refuted:
        assert not oracle_covers(general, specific)


@settings(max_examples=200)
@given(
    subscriptions(repeat_predicates=True),
    st.lists(subscriptions(repeat_predicates=True), min_size=1, max_size=4),
)
def test_a_target_tested_against_many_answers_as_its_filter_does(specific, generals):
    """A placement keeps its subscription's filters as ``Target`` (corners and middle built
    once) and tests them against many nodes: each answer is the one the filter alone gives
    (which the oracle tests above check), whatever was tested before."""
    targets = [Target(compiled) for compiled in specific.filters]
    for general in generals:
        for target in targets:
            assert filter_covered(target, general.filters) == filter_covered(
                target.filter, general.filters
            )
        event(f"covers={qel.covers(general, specific)}")


@st.composite
def unions_along_one_variable(draw: st.DrawFn) -> tuple[qel.Subscription, qel.Subscription]:
    """A subscription, and a DNF over some of its patterns whose alternatives constrain mostly
    one of its variables (now and then another too, or the subject): the shape
    ``_along_one_predicate`` decides, and its near misses."""
    specific = draw(subscriptions())
    variables = [p.object for p in specific.patterns if isinstance(p.object, str)]
    if not variables:
        return specific, draw(subscriptions())
    axis = draw(st.sampled_from(variables))
    disjuncts = []
    for _ in range(draw(st.integers(1, 4))):
        atoms = [draw(atoms_for(axis)) for _ in range(draw(st.integers(0, 2)))]
        if draw(st.integers(0, 4)) == 0:
            atoms.append(draw(atoms_for(draw(st.sampled_from(variables)))))
        disjuncts.append(tuple(atoms))
    kept = [
        p for p in specific.patterns if p.object == axis or draw(st.booleans())
    ]  # fewer patterns: broader
    used = {atom.variable for d in disjuncts for atom in d}
    kept += [p for p in specific.patterns if p.object in used and p not in kept]
    try:
        general = qel.Subscription("s", tuple(kept), qel.Constraint.of(disjuncts), ())
    except qel.QueryError:
        general = qel.Subscription("s", tuple(kept), qel.Constraint.of([()]), ())
    return general, specific


@settings(max_examples=300)
@given(st.one_of(unions_along_one_variable(), st.tuples(subscriptions(), subscriptions())))
def test_a_union_along_one_predicate_is_decided_exactly(pair):
    """``_along_one_predicate``, whenever it answers, answers as the cell search over the same
    candidates, and, over every filter of the target, as the brute-force oracle."""
    general, specific = pair
    answers = []
    for target in specific.filters:
        usable = [h for h in general.filters if h.predicates <= target.predicates]
        answer = _along_one_predicate(target, usable) if usable else False
        event(f"along one predicate: {answer}")
        if answer is not None:
            assert answer == _CellSearch(target, usable, DEFAULT_BUDGET).run()
        answers.append(answer)
    if None not in answers:
        assert all(answers) == oracle_covers(general, specific)
