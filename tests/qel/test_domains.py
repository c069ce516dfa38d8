"""``qel.domains.subset`` against its definition: every term of the inner domain is in the outer
one, checked on sample terms that stand for every stretch of values the domains can tell apart
(each bound, a point between each two, one beyond either end, per kind; the strings and URIs the
fixed values use, and one that none does)."""

import itertools
from fractions import Fraction

from hypothesis import event, given, settings
from hypothesis import strategies as st

from qel.domains import (
    ANY,
    ContainsDomain,
    Domain,
    PointDomain,
    RangeDomain,
    range_is_satisfiable,
    subset,
)
from qel.terms import URI, Literal

BOUNDS = [None, 0, 1, 2, Fraction(5, 2)]
KINDS = ["number", "date"]
STRINGS = ["a", "ab", "b"]
URIS = ["u:1", "u:2"]


@st.composite
def ranges(draw: st.DrawFn) -> RangeDomain:
    """A satisfiable range of either kind over a few bounds, each end open, closed or unbounded
    (a point among them)."""
    kind = draw(st.sampled_from(KINDS))
    while True:
        low, high = draw(st.sampled_from(BOUNDS)), draw(st.sampled_from(BOUNDS))
        domain = RangeDomain(
            kind,
            low,
            low is not None and draw(st.booleans()),
            high,
            high is not None and draw(st.booleans()),
        )
        if range_is_satisfiable(domain):
            return domain


def domains() -> st.SearchStrategy[Domain]:
    return st.one_of(
        ranges(),
        st.just(ANY),
        st.builds(
            lambda value: PointDomain("string", value, Literal(value)), st.sampled_from(STRINGS)
        ),
        st.builds(lambda value: PointDomain("uri", value, URI(value)), st.sampled_from(URIS)),
    )


def _terms() -> list[tuple[str, object]]:
    finite = sorted(bound for bound in BOUNDS if bound is not None)
    between = [Fraction(low + high) / 2 for low, high in itertools.pairwise(finite)]
    values = [Fraction(finite[0] - 1), *map(Fraction, finite), *between, Fraction(finite[-1] + 1)]
    return [
        *((kind, value) for kind in KINDS for value in values),
        *(("string", text) for text in [*STRINGS, "unused"]),
        *(("uri", iri) for iri in [*URIS, "u:unused"]),
    ]


TERMS = _terms()


@settings(max_examples=3000)
@given(domains(), domains())
def test_a_domain_is_within_another_iff_each_of_its_terms_is(inner, outer):
    expected = all(outer.admits(kind, value) for kind, value in TERMS if inner.admits(kind, value))
    event(f"within: {expected}")
    assert subset(inner, outer) == expected


def test_contains_within_contains_iff_each_outer_substring_is_in_an_inner_one():
    assert subset(ContainsDomain(("abc", "x")), ContainsDomain(("b", "x")))
    assert not subset(ContainsDomain(("abc",)), ContainsDomain(("b", "x")))
    assert not subset(ContainsDomain(("abc",)), RangeDomain("number"))
    assert not subset(RangeDomain("number", 0, True, 1, True), ContainsDomain(("a",)))
    assert subset(PointDomain("string", "xabc", Literal("xabc")), ContainsDomain(("ab",)))
    assert subset(ContainsDomain(("a",)), ANY)
    assert not subset(ANY, ContainsDomain(("a",)))
