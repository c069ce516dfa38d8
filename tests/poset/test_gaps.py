"""``poset.gaps``: a gap in one dimension refutes covering only where ``qel.covers`` says no, and
the union of ranges is decided as sample points between every bound decide it."""

import itertools
from fractions import Fraction

from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from poset.gaps import _within, columns, escapes
from qel.domains import RangeDomain
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
def test_within_is_the_union_of_the_ranges(inner, held, other_kind):
    union = [*held, *other_kind]
    expected = all(
        any(outer.admits("number", value) for outer in union)
        for value in _samples()
        if inner.admits("number", value)
    )
    event(f"within: {expected}")
    assert _within(inner, tuple(union)) == expected


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
