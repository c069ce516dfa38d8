"""``poset.gaps``: a gap in one dimension refutes covering only where ``qel.covers`` says no, and
a column (the union of a dimension's domains, compiled) holds a domain as sample points between
every bound, and the domains' own ``admits`` and ``subset``, decide it."""

import itertools
from fractions import Fraction

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from poset.gaps import Column, columns, escapes
from qel.domains import ContainsDomain, Domain, PointDomain, RangeDomain, subset
from qel.terms import URI
from tests.strategies import subscriptions
from workloads.shapes import Shapes

BOUNDS = [None, 0, 1, 2, 3, Fraction(5, 2)]


@st.composite
def ranges(draw: st.DrawFn, kind: str = "number") -> RangeDomain:
    """A satisfiable range over a few bounds, either end open, closed or unbounded."""
    while True:
        low, high = draw(st.sampled_from(BOUNDS)), draw(st.sampled_from(BOUNDS))
        domain = RangeDomain(kind, low, low is not None and draw(st.booleans()), high)
        domain = RangeDomain(
            kind, low, domain.low_inclusive, high, high is not None and draw(st.booleans())
        )
        if qel.domains.range_is_satisfiable(domain):
            return domain


def _samples() -> list[Fraction]:
    """Every bound, a point between each two, one below and one above all: each range over
    ``BOUNDS`` holds all or none of the values of each stretch these points stand for."""
    finite = sorted(bound for bound in BOUNDS if bound is not None)
    between = [Fraction(low + high) / 2 for low, high in itertools.pairwise(finite)]
    return [Fraction(finite[0] - 1), *map(Fraction, finite), *between, Fraction(finite[-1] + 1)]


@settings(max_examples=2000)
@given(ranges(), st.lists(ranges(), max_size=4), st.lists(ranges("date"), max_size=1))
def test_a_column_holds_the_union_of_the_ranges(inner, held, other_kind):
    union = [*held, *other_kind]
    expected = all(
        any(outer.admits("number", value) for outer in union)
        for value in _samples()
        if inner.admits("number", value)
    )
    event(f"holds: {expected}")
    assert Column(tuple(union)).holds(inner) == expected


def _others() -> st.SearchStrategy[Domain]:
    """Fixed values of other kinds than numbers (one of them a number's), and ``contains``."""
    return st.one_of(
        st.builds(
            lambda value: PointDomain("string", value, URI("urn:unused")),
            st.sampled_from(["a", "ab", "b"]),
        ),
        st.builds(
            lambda value: PointDomain("uri", value, URI(value)), st.sampled_from(["u:1", "u:2"])
        ),
        st.builds(
            lambda parts: ContainsDomain(tuple(sorted(set(parts)))),
            st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2),
        ),
    )


def _brute_holds(inner: Domain, held: list[Domain]) -> bool:
    """Every term of ``inner`` in one of ``held``: sample points for a range of more than one
    value, else ``admits`` of its one value, ``subset`` of one domain for a ``contains``."""
    if type(inner) is RangeDomain and not inner.is_point:
        return all(
            any(outer.admits(inner.kind, value) for outer in held)
            for value in _samples()
            if inner.admits(inner.kind, value)
        )
    if type(inner) is RangeDomain:
        return any(outer.admits(inner.kind, inner.low) for outer in held)
    if type(inner) is PointDomain:
        return any(outer.admits(inner.kind, inner.value) for outer in held)
    return any(subset(inner, outer) for outer in held)


@settings(max_examples=2000)
@given(
    st.one_of(ranges(), ranges("date"), _others()),
    st.lists(st.one_of(ranges(), ranges("date"), _others()), max_size=5),
)
def test_a_column_holds_what_one_of_its_domains_holds_or_their_ranges_together(inner, held):
    expected = _brute_holds(inner, held)
    event(f"holds: {expected}, {type(inner).__name__}")
    column = Column(tuple(held))
    assert column.holds(inner) == expected
    spans = column.spans  # disjoint, a value left out between two of a kind
    for first, second in itertools.pairwise(spans):
        if first.kind == second.kind:
            assert first.high is not None and second.low is not None
            assert first.high < second.low or (
                first.high == second.low and not first.high_inclusive and not second.low_inclusive
            )


@pytest.mark.slow  # some 5 s of CPU: the fast tier has the shapes workload's pairs below
@settings(max_examples=1500)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_a_gap_refutes_only_what_is_not_covered(general, specific):
    found = columns(general.filters)
    escaped = any(escapes(found, part) for part in specific.filters)
    event(f"escapes: {escaped}, {len(general.filters)} filters")
    if escaped:
        assert not qel.covers(general, specific)


@settings(max_examples=500)
@given(subscriptions(max_patterns=3, repeat_predicates=True))
def test_a_subscription_has_no_gap_against_itself(general):
    found = columns(general.filters)
    assert not any(escapes(found, part) for part in general.filters)


def test_on_the_shapes_workload_a_gap_refutes_only_what_is_not_covered():
    shapes = Shapes(seed=3)
    drawn = [qel.parse_subscription(shapes.subscription()) for _ in range(300)]
    general = [subscription for subscription in drawn if len(subscription.filters) > 1]
    refuted = 0
    for first in general:
        found = columns(first.filters)
        for second in drawn:
            if any(escapes(found, part) for part in second.filters):
                refuted += 1
                assert not qel.covers(first, second)
    assert refuted > 10_000  # of 43,200 pairs: the test exercises the refutation
