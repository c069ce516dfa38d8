"""A family's points under dominance (``poset.dominance``) against brute force: the minimal points
covering a query and the maximal ones it covers, after additions and removals; exact floats (or
none); and posets of two-dimensional families (price ranges, ``P <= a ; S >= b`` over a city,
with ceilings and broad subscriptions across them) against the brute-force Hasse diagram, an
abandoned family (a bound no float holds) included."""

from fractions import Fraction

from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from poset import dominance
from poset import poset as poset_module
from poset.dominance import FamilyPoints, Point, point
from poset.poset import SubscriptionPoset
from tests.poset.test_poset import check_invariants


class Member:
    """A stand-in for a poset node: a point and the row the index gives it."""

    def __init__(self, at: Point) -> None:
        self.at = at
        self.slot = -1


def covers(general: Point, specific: Point) -> bool:
    """Brute force: every coordinate larger, or equal with an end included wherever the other's
    is."""
    return all(
        g > s or (g == s and gi >= si)
        for g, s, gi, si in zip(general[0], specific[0], general[1], specific[1], strict=True)
    )


@st.composite
def points(draw: st.DrawFn, dimensions: int, flags: tuple[int | None, ...] = ()) -> Point:
    """A point; ``flags``, per coordinate, the flag it has (None: drawn)."""
    flags = flags or (None,) * dimensions
    return (
        tuple(float(draw(st.integers(0, 4))) for _ in range(dimensions)),
        tuple(draw(st.integers(0, 1)) if flag is None else flag for flag in flags),
    )


@st.composite
def scenes(draw: st.DrawFn) -> tuple[list[Point], set[int], Point]:
    """Distinct points (as a family's members are), some of them removed again, and a query;
    in some coordinates every member may have the same flag (a query compares values alone)."""
    dimensions = draw(st.integers(1, 3))
    flags = tuple(draw(st.sampled_from([None, 0, 1])) for _ in range(dimensions))
    members = draw(st.lists(points(dimensions, flags), unique=True, max_size=30))
    gone = draw(st.sets(st.integers(0, max(0, len(members) - 1)))) if members else set()
    return members, gone, draw(points(dimensions))


@settings(max_examples=400)
@given(scenes(), st.booleans())
def test_the_extreme_members_are_brute_forces(scene, as_complex):
    """With the pairs sorted either way (``dominance._pair_order``)."""
    threshold = dominance.PAIRS_AS_COMPLEX
    dominance.PAIRS_AS_COMPLEX = 0 if as_complex else threshold  # type: ignore[misc]
    try:
        check_extremes(scene)
    finally:
        dominance.PAIRS_AS_COMPLEX = threshold  # type: ignore[misc]


def check_extremes(scene: tuple[list[Point], set[int], Point]) -> None:
    drawn, gone, query = scene
    index = FamilyPoints(len(query[0]))
    members = [Member(at) for at in drawn]
    for member in members:
        index.add(member, member.at)
    for number in sorted(gone):
        index.remove(members[number])
    live = [m for n, m in enumerate(members) if n not in gone]
    above = [m for m in live if covers(m.at, query)]
    below = [m for m in live if covers(query, m.at)]
    minimal = {id(m) for m in above if not any(o is not m and covers(m.at, o.at) for o in above)}
    maximal = {id(m) for m in below if not any(o is not m and covers(o.at, m.at) for o in below)}
    event(f"minimal: {min(len(minimal), 3)}")
    assert {id(m) for m in index.above(query)} == minimal
    assert {id(m) for m in index.below(query)} == maximal


@given(st.lists(st.one_of(st.integers(), st.fractions()), min_size=2, max_size=2))
def test_points_are_exact_or_absent(bounds):
    first, second = (point((bound, None), 0b01) for bound in bounds)
    if first is None or second is None:
        return
    assert (first[0][0] < second[0][0]) == (bounds[0] > bounds[1])  # a low bound is negated
    assert (first[0][0] == second[0][0]) == (bounds[0] == bounds[1])


def test_bounds_no_float_holds_have_no_point():
    assert point((None, Fraction(1, 3)), 0) is None
    assert point((None, 2**60 + 1), 0) is None
    assert point((None, Fraction("123.4")), 0b10) == ((123.4,), (1,))
    assert point((Fraction("0.5"), 7), 0b01) == ((-0.5, 7.0), (1, 0))


P = "@prefix ex: <http://example.org/> .\n"
PRICES = ("1", "2", "3", "4", "2.5", "0.12345678901234567891")


@st.composite
def alerts(draw: st.DrawFn, *, exotic: bool) -> qel.Subscription:
    """Listings-shaped alerts over two cities and small value sets: price ranges, DNF, ceilings
    (with and without a city), a city alone; ``exotic`` admits a bound no float holds."""
    prices = PRICES if exotic else PRICES[:5]
    city = draw(st.sampled_from(["ex:c1", "ex:c1", "ex:c1", "ex:c2"]))
    low, high = sorted(draw(st.sampled_from(prices)) for _ in range(2))
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
    return qel.parse_subscription(P + text)


@settings(max_examples=150, deadline=None)
@given(st.data(), st.booleans())
def test_posets_of_wide_families_hold_the_hasse_diagram(data, exotic):
    subscriptions = data.draw(st.lists(alerts(exotic=exotic), min_size=1, max_size=30))
    poset = SubscriptionPoset()
    if data.draw(st.booleans()):
        poset.insert_many((s, "peer", str(n)) for n, s in enumerate(subscriptions))
    else:
        for number, subscription in enumerate(subscriptions):
            poset.insert(subscription, "peer", str(number))
    event(f"indexed families: {sum(p.usable for p in poset._families.values())}")
    check_invariants(poset)
    gone = data.draw(st.lists(st.integers(0, len(subscriptions) - 1), unique=True))
    for number in gone:
        poset.remove("peer", str(number))
        check_invariants(poset)
    for number, subscription in enumerate(subscriptions):
        if number in gone:
            poset.insert(subscription, "peer", str(number))
    check_invariants(poset)


@settings(max_examples=100, deadline=None)
@given(st.data(), st.sampled_from([0, 2, 8, 1_000]))
def test_wide_families_placed_by_groups_or_by_value_hold_the_hasse_diagram(data, grouped_from):
    """Whether a family's bottoms are looked for among its groups or by value (at any
    ``_GROUPED_FROM``), one at a time and after removals, the poset holds the Hasse diagram."""
    subscriptions = data.draw(st.lists(alerts(exotic=False), min_size=1, max_size=30))
    kept = poset_module._GROUPED_FROM
    poset_module._GROUPED_FROM = grouped_from
    try:
        poset = SubscriptionPoset()
        for number, subscription in enumerate(subscriptions):
            poset.insert(subscription, "peer", str(number))
        check_invariants(poset)
        for number in data.draw(st.lists(st.integers(0, len(subscriptions) - 1), unique=True)):
            poset.remove("peer", str(number))
        check_invariants(poset)
    finally:
        poset_module._GROUPED_FROM = kept
