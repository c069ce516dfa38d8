"""``matches`` against rdflib's own SPARQL engine (an independent oracle), plus the value semantics."""

import pytest
import rdflib
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from qel.rdf import to_rdflib
from tests.strategies import publications, subscriptions

XSD = "http://www.w3.org/2001/XMLSchema#"


def oracle_sparql(subscription: qel.Subscription) -> str:
    """The subscription in SPARQL with the language's typing written out as guards.

    rdflib orders values of different types instead of raising SPARQL's type error (it finds
    ``"a" > -1`` true), so every comparison states the type it needs, as the paper's typed
    language does.
    """

    def term(value):
        return to_rdflib(value).n3()

    def atom(a):
        v, c = f"?{a.variable}", term(a.value)
        if a.op == "contains":
            return f"(isLiteral({v}) && datatype({v}) = <{XSD}string> && CONTAINS({v}, {c}))"
        if a.value.kind == "number":
            return f"(isNumeric({v}) && {v} {a.op} {c})"
        if a.value.kind == "date":
            return f"(datatype({v}) = <{XSD}date> && {v} {a.op} {c})"
        if a.value.kind == "string":
            return f"(isLiteral({v}) && datatype({v}) = <{XSD}string> && {v} = {c})"
        return f"({v} = {c})"

    lines = ["ASK {"]
    for pattern in subscription.patterns:
        obj = f"?{pattern.object}" if isinstance(pattern.object, str) else term(pattern.object)
        lines.append(f"  ?{subscription.subject} {term(pattern.predicate)} {obj} .")
    alternatives = [
        "(" + " && ".join(atom(a) for a in conjunction) + ")" if conjunction else "true"
        for conjunction in subscription.constraint.disjuncts
    ]
    lines.append("  FILTER (" + " || ".join(alternatives) + ")")
    lines.append("}")
    return "\n".join(lines)


def rdflib_ask(subscription: qel.Subscription, publication: qel.Publication) -> bool:
    graph = rdflib.Graph()
    for s, p, o in publication.triples:
        graph.add((to_rdflib(s), to_rdflib(p), to_rdflib(o)))
    return bool(graph.query(oracle_sparql(subscription)).askAnswer)


@pytest.mark.slow
@settings(max_examples=400)
@given(
    subscriptions(sparql_safe=True, repeat_predicates=True),
    publications(sparql_safe=True),
)
def test_matches_agrees_with_rdflib_sparql(subscription, publication):
    assert qel.matches(subscription, publication) == rdflib_ask(subscription, publication)


@pytest.mark.slow
@given(subscriptions(repeat_predicates=True))
def test_sparql_text_round_trips(subscription):
    assert qel.parse_subscription(subscription.to_sparql()) == subscription


@given(subscriptions(repeat_predicates=True), st.data())
def test_a_witness_publication_built_from_each_filter_matches(subscription, data):
    from qel import domains

    for compiled in subscription.filters:
        statements = set()
        for predicate, domain in compiled.patterns:
            term = domains.witness(domain) or qel.URI("http://example.org/anything")
            statements.add((predicate, term))
        subject = (
            compiled.subject.term
            if isinstance(compiled.subject, domains.PointDomain)
            else qel.URI("http://example.org/s")
        )
        publication = qel.Publication(subject, frozenset(statements))
        assert qel.matches(subscription, publication)


def parse(text):
    [publication] = qel.parse_publications(text, "turtle")
    return publication


EX = "@prefix ex: <http://example.org/> .\n"
PREFIXES = "@prefix dc: <http://purl.org/dc/elements/1.1/> . @prefix ex: <http://example.org/> .\n"


def test_numbers_compare_by_value_across_integer_decimal_and_double():
    q = qel.parse_subscription("X : t(X, dc:date, D), D = 2004")
    for literal in ("2004", "2004.0", "2.004E3", '"2004"^^<http://www.w3.org/2001/XMLSchema#int>'):
        assert qel.matches(q, parse(PREFIXES + f"ex:a dc:date {literal} ."))
    assert not qel.matches(q, parse(PREFIXES + "ex:a dc:date 2004.5 ."))
    # A number never equals a string or a date with the same digits.
    assert not qel.matches(q, parse(PREFIXES + 'ex:a dc:date "2004" .'))


def test_ranges_on_decimals_are_exact():
    q = qel.parse_subscription(EX + "X : t(X, ex:p, V), V > 0.1, V <= 0.3")
    assert not qel.matches(q, parse(PREFIXES + "ex:a ex:p 0.1 ."))
    assert qel.matches(q, parse(PREFIXES + "ex:a ex:p 0.3 ."))
    assert qel.matches(q, parse(PREFIXES + "ex:a ex:p 0.2000000000000000000001 ."))


def test_dates_and_datetimes_compare_in_time_order_with_time_zones():
    q = qel.parse_subscription(EX + "X : t(X, ex:when, W), W >= 2004-01-01, W < 2004-01-02")
    xsd = "<http://www.w3.org/2001/XMLSchema#"
    inside = [f'"2004-01-01"^^{xsd}date>', f'"2004-01-01T23:59:59Z"^^{xsd}dateTime>']
    outside = [f'"2004-01-01T23:30:00-01:00"^^{xsd}dateTime>', f'"2003-12-31"^^{xsd}date>']
    for literal in inside:
        assert qel.matches(q, parse(PREFIXES + f"ex:a ex:when {literal} ."))
    for literal in outside:
        assert not qel.matches(q, parse(PREFIXES + f"ex:a ex:when {literal} ."))


def test_contains_is_case_sensitive_and_ignores_language_tags():
    q = qel.parse_subscription('X : t(X, dc:creator, Y), Y contains "Nejdl"')
    assert qel.matches(q, parse(PREFIXES + 'ex:a dc:creator "W. Nejdl"@de .'))
    assert not qel.matches(q, parse(PREFIXES + 'ex:a dc:creator "W. NEJDL" .'))
    # contains holds only for string literals, never for the text of a URI.
    assert not qel.matches(q, parse(PREFIXES + "ex:a dc:creator <http://example.org/Nejdl> ."))


def test_string_equality_ignores_language_tags():
    q = qel.parse_subscription('X : t(X, dc:title, T), T = "Algorithms"')
    assert qel.matches(q, parse(PREFIXES + 'ex:a dc:title "Algorithms"@en .'))
    assert not qel.matches(q, parse(PREFIXES + 'ex:a dc:title "algorithms" .'))


def test_repeated_values_of_one_property_each_get_a_chance():
    q = qel.parse_subscription('X : t(X, dc:creator, Y), Y contains "Koubarakis"')
    publication = parse(PREFIXES + 'ex:a dc:creator "Nejdl", "Koubarakis" .')
    assert qel.matches(q, publication)


def test_subject_constraint_and_missing_property():
    q = qel.parse_subscription(EX + "X : t(X, dc:creator, Y), X = ex:a")
    assert qel.matches(q, parse(PREFIXES + 'ex:a dc:creator "n" .'))
    assert not qel.matches(q, parse(PREFIXES + 'ex:b dc:creator "n" .'))
    assert not qel.matches(q, parse(PREFIXES + 'ex:a dc:title "n" .'))


def test_ill_typed_literals_only_match_unconstrained_variables():
    xsd = "<http://www.w3.org/2001/XMLSchema#"
    publication = parse(PREFIXES + f'ex:a ex:n "twelve"^^{xsd}integer> .')
    assert qel.matches(qel.parse_subscription(EX + "X : t(X, ex:n, N)"), publication)
    assert not qel.matches(qel.parse_subscription(EX + "X : t(X, ex:n, N), N > 0"), publication)
    assert not qel.matches(qel.parse_subscription(EX + "X : t(X, ex:n, N), N < 1"), publication)


def test_nan_is_outside_every_range_and_inf_inside_unbounded_ones():
    xsd = "<http://www.w3.org/2001/XMLSchema#double>"
    nan = parse(PREFIXES + f'ex:a dc:date "NaN"^^{xsd} .')
    inf = parse(PREFIXES + f'ex:a dc:date "INF"^^{xsd} .')
    above = qel.parse_subscription("X : t(X, dc:date, D), D > 5")
    below = qel.parse_subscription("X : t(X, dc:date, D), D < 5")
    assert not qel.matches(above, nan) and not qel.matches(below, nan)
    assert qel.matches(above, inf) and not qel.matches(below, inf)
