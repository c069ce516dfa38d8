"""Covering decided by the bounds within a family (``poset.families``) is ``qel.covers``: pairs of
one family drawn from templates (filters of ranges, fixed values and unconstrained objects, one to
three alternatives), then posets of such subscriptions checked against brute force."""

import itertools

from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from poset import families
from poset.chains import Probe
from poset.families import covers_by_family, projected, signature
from poset.poset import SubscriptionPoset, _covers_signed
from qel.domains import RangeDomain
from tests.poset.test_poset import check_invariants
from tests.strategies import subscriptions

PREFIX = "@prefix ex: <http://example.org/> .\n"
PREDICATES = ("ex:p", "ex:q", "ex:r")
VALUES = (0, 1, 2, 3)
KINDS = ("any", "fixed", "low", "high", "both")


@st.composite
def templates(draw: st.DrawFn) -> tuple[int, list[list[str]]]:
    """How many patterns, and per alternative the kind of constraint on each."""
    patterns = draw(st.integers(1, 3))
    alternatives = draw(st.integers(1, 3))
    return patterns, [
        [draw(st.sampled_from(KINDS)) for _ in range(patterns)] for _ in range(alternatives)
    ]


@st.composite
def members(draw: st.DrawFn, template: tuple[int, list[list[str]]]) -> qel.Subscription:
    """A subscription of the template, with drawn bounds (the fixed values are the template's)."""
    patterns, alternatives = template
    conjunctions = []
    for kinds in alternatives:
        atoms = []
        for number, kind in enumerate(kinds):
            variable = f"V{number}"
            if kind == "fixed":
                atoms.append(f"{variable} = {number}")
            if kind in ("low", "both"):
                op = draw(st.sampled_from([">", ">="]))
                atoms.append(f"{variable} {op} {draw(st.sampled_from(VALUES))}")
            if kind in ("high", "both"):
                op = draw(st.sampled_from(["<", "<="]))
                atoms.append(f"{variable} {op} {draw(st.sampled_from(VALUES))}")
        conjunctions.append(", ".join(atoms))
    triples = ", ".join(f"t(X, {PREDICATES[n]}, V{n})" for n in range(patterns))
    if all(conjunctions):
        constraint = " ; ".join(conjunctions)
        text = f"X : {triples}, ({constraint})"
    else:
        text = f"X : {triples}"  # an unconstrained alternative: the subscription is its patterns
    try:
        return qel.parse_subscription(PREFIX + text)
    except qel.QueryError:  # an unsatisfiable draw (V0 > 2, V0 < 1)
        return qel.parse_subscription(PREFIX + f"X : {triples}")


@st.composite
def family_pairs(draw: st.DrawFn) -> tuple[qel.Subscription, qel.Subscription]:
    template = draw(templates())
    return draw(members(template)), draw(members(template))


@settings(max_examples=600)
@given(family_pairs())
def test_covering_decided_by_the_bounds_is_qel_covers(pair):
    general, specific = pair
    first, second = Probe(general, _covers_signed), Probe(specific, _covers_signed)
    decided = covers_by_family(first, second)
    event("same family" if first.family is second.family else "other families")
    event(f"decided: {decided}")
    if decided is not None:
        assert decided == qel.covers(general, specific)
    assert _covers_signed(first, second) == qel.covers(general, specific)


@settings(max_examples=600)
@given(st.data(), templates(), templates())
def test_covering_across_two_families_is_qel_covers(data, template, other):
    """Members of two templates (often two families of one filter, whose covering a
    ``projection`` decides by bounds), asked both ways, three times (a pair of families met
    once is marked, its projection built when met again, then kept)."""
    first = Probe(data.draw(members(template)), _covers_signed)
    second = Probe(data.draw(members(other)), _covers_signed)
    for _ in range(3):
        for general, specific in ((first, second), (second, first)):
            expected = qel.covers(general.subscription, specific.subscription)
            assert _covers_signed(general, specific) == expected
    if first.family is not None and second.family is not None:
        event(f"projection: {type(projected(first, second)).__name__}")


@settings(max_examples=40, deadline=None)
@given(st.data(), templates(), templates())
def test_posets_of_families_hold_the_hasse_diagram(data, template, other):
    subscriptions = [
        data.draw(members(data.draw(st.sampled_from([template, other])))) for _ in range(10)
    ]
    poset = SubscriptionPoset()
    for number, subscription in enumerate(subscriptions):
        poset.insert(subscription, "peer", str(number))
    check_invariants(poset)
    for number in data.draw(st.sets(st.integers(0, len(subscriptions) - 1))):
        poset.remove("peer", str(number))
    check_invariants(poset)


def test_the_projections_kept_are_bounded_and_answers_stay_exact(monkeypatch):
    """Past ``PROJECTIONS_KEPT`` pairs of families the kept projections are forgotten, and
    covering across families answers as ``qel.covers`` throughout."""
    monkeypatch.setattr(families, "PROJECTIONS_KEPT", 3)
    for family in list(families._FAMILIES.values()):  # what earlier tests left kept
        monkeypatch.setattr(family, "over", None)
    monkeypatch.setattr(families._KEPT, "count", 0)
    prefix = "@prefix ex: <http://example.org/> .\n"
    texts = [
        'X : t(X, ex:city, C), t(X, ex:price, P), C = "a", P <= 5',
        'X : t(X, ex:city, C), t(X, ex:price, P), C = "b", P <= 7',
        "X : t(X, ex:city, C), t(X, ex:price, P), P <= 9",
        "X : t(X, ex:city, C), t(X, ex:price, P), P >= 2, P <= 6",
        "X : t(X, ex:price, P), P < 8",
        'X : t(X, ex:city, C), C = "a"',
    ]
    probes = [Probe(qel.parse_subscription(prefix + text), _covers_signed) for text in texts]
    for _ in range(3):
        for general in probes:
            for specific in probes:
                expected = qel.covers(general.subscription, specific.subscription)
                assert _covers_signed(general, specific) == expected
                kept = sum(len(f.over or ()) for f in list(families._FAMILIES.values()))
                assert kept <= 3


def test_range_parts_past_their_bound_are_not_shared_and_families_stay_one(monkeypatch):
    """Past ``RANGE_PARTS_KEPT`` the range parts of family keys are not shared; two members of
    one family still get the one family (keys compare by value)."""
    monkeypatch.setattr(families, "RANGE_PARTS_KEPT", 0)
    prefix = "@prefix ex: <http://example.org/> .\n"
    first, second = (
        qel.parse_subscription(prefix + f"X : t(X, ex:unshared-part, P), P <= {bound}")
        for bound in (5, 7)
    )
    assert signature(first)[0] is signature(second)[0] is not None
    assert signature(first)[1:] != signature(second)[1:]


def _family_key(subscription: qel.Subscription) -> tuple[object, ...]:
    """A family's key as the module docstring defines it, built afresh: per filter, its subject
    and its patterns with each range as its kind and which ends are open."""
    return tuple(
        (
            compiled.subject,
            tuple(
                (predicate, domain.kind, domain.low is None, domain.high is None)
                if type(domain) is RangeDomain
                else (predicate, domain)
                for predicate, domain in compiled.patterns
            ),
        )
        for compiled in subscription.filters
    )


@settings(max_examples=300)
@given(st.lists(subscriptions(max_patterns=3), min_size=2, max_size=5))
def test_subscriptions_share_a_family_iff_their_keys_are_equal(drawn):
    """Family keys share the filters' own pattern pairs (and a filter's patterns, when it has no
    range): two subscriptions still get one family exactly when their keys are equal."""
    signed = [signature(subscription)[0] for subscription in drawn]
    for (first, family), (second, other) in itertools.combinations(
        zip(drawn, signed, strict=True), 2
    ):
        event(f"one family: {family is other}")
        assert (family is other) == (_family_key(first) == _family_key(second))
