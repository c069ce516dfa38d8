"""A witness's numbers and dates are literals built with the values they were written from
(``qel.terms._read``), not read back from their text: each is the literal reading its text back
gives (lexical form, datatype, kind, value and the value's type), and each witness is the
publication the text route built (``text_route_witness``: the same statements in the same
order, subject, ``values``), on hypothesis-drawn subscriptions and on the shapes workload."""

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from qel import domains
from qel.domains import ContainsDomain, PointDomain, RangeDomain
from qel.filters import FRESH_URI, WITNESS_SEPARATOR, Filter, _witness
from qel.model import Publication
from qel.terms import KIND_DATE, KIND_NUMBER, Literal, Term, instant_literal, number
from tests.strategies import subscriptions
from workloads.shapes import Shapes


def exactly(term: Term) -> tuple[object, ...]:
    """Everything a term holds, the value's type included (``1 == Fraction(1)``)."""
    if type(term) is not Literal:
        return (type(term), term.value)
    return (term.lexical, term.datatype, term.lang, term.kind, term.value, type(term.value))


def read_back(term: Term) -> Term:
    return Literal(term.lexical, term.datatype, term.lang) if type(term) is Literal else term


def text_route_witness(compiled: Filter) -> Publication:
    """The witness as it was built before: every literal read back from its text."""
    statements = set()
    for predicate, domain in compiled.patterns:
        if isinstance(domain, ContainsDomain):
            term: Term = Literal(WITNESS_SEPARATOR.join(domain.substrings))
        else:
            term = domains.witness(domain) or FRESH_URI
        statements.add((predicate, read_back(term)))
    subject = compiled.subject.term if isinstance(compiled.subject, PointDomain) else FRESH_URI
    return Publication(subject, frozenset(statements))  # type: ignore[arg-type]


def assert_same_witness(compiled: Filter) -> None:
    made, oracle = _witness(compiled), text_route_witness(compiled)
    assert made == oracle
    assert [(p, exactly(t)) for p, t in made.statements] == [
        (p, exactly(t)) for p, t in oracle.statements
    ]
    assert made.values == oracle.values
    assert {p: [type(v) for _, v in pairs] for p, pairs in made.values.items()} == {
        p: [type(v) for _, v in pairs] for p, pairs in oracle.values.items()
    }


DECIMAL_FRACTIONS = st.builds(
    Fraction, st.integers(-(10**12), 10**12), st.sampled_from([1, 2, 4, 5, 8, 10, 1000, 2**20])
)
ANY_FRACTIONS = st.fractions(max_denominator=10**6, min_value=-(10**12), max_value=10**12)


@settings(max_examples=2000)
@given(st.one_of(st.integers(-(10**30), 10**30), DECIMAL_FRACTIONS))
def test_a_number_literal_is_the_one_its_text_reads_back_as(value):
    made = number(value)
    assert exactly(made) == exactly(read_back(made))


@settings(max_examples=2000)
@given(
    st.one_of(
        st.integers(-(10**11), 10**12),
        ANY_FRACTIONS,
        st.builds(Fraction, st.integers(-(10**11), 10**12), st.sampled_from([1, 2, 1000])),
    )
)
def test_a_date_literal_is_the_one_its_text_reads_back_as(seconds):
    """Years before 0 (written in fewer than four digits: read as "other") and fractions
    without a decimal form (rounded) included."""
    made = instant_literal(seconds)
    assert exactly(made) == exactly(read_back(made))


@settings(max_examples=2000)
@given(
    st.sampled_from([KIND_NUMBER, KIND_DATE]),
    st.one_of(st.none(), st.integers(-(10**9), 10**9), DECIMAL_FRACTIONS),
    st.one_of(st.none(), st.integers(-(10**9), 10**9), DECIMAL_FRACTIONS),
    st.booleans(),
    st.booleans(),
)
def test_a_range_witness_is_the_literal_its_text_reads_back_as(kind, low, high, low_in, high_in):
    if low is not None and high is not None and low > high:
        low, high = high, low
    made = domains.witness(RangeDomain(kind, low, low_in, high, high_in))
    assert made is not None
    assert exactly(made) == exactly(read_back(made))


@settings(max_examples=1000)
@given(subscriptions(max_patterns=4, repeat_predicates=True))
def test_a_witness_is_the_publication_the_text_route_built(subscription):
    for compiled in subscription.filters:
        assert_same_witness(compiled)


def test_on_the_shapes_workload_a_witness_is_the_publication_the_text_route_built():
    shapes = Shapes(seed=5)
    ranged = 0
    for _ in range(1000):
        for compiled in qel.parse_subscription(shapes.subscription()).filters:
            assert_same_witness(compiled)
            ranged += any(type(domain) is RangeDomain for _, domain in compiled.patterns)
    assert ranged > 500


@given(
    st.one_of(st.integers(-(10**9), 10**9), DECIMAL_FRACTIONS),
    st.one_of(st.integers(-(10**9), 10**9), DECIMAL_FRACTIONS),
)
def test_a_two_sided_range_is_sampled_at_its_middle_as_a_fraction(low, high):
    if low == high:
        return
    low, high = min(low, high), max(low, high)
    middle = domains.range_sample(RangeDomain(KIND_NUMBER, low, False, high, False))
    assert type(middle) is Fraction
    assert middle == Fraction(low + high) / 2
