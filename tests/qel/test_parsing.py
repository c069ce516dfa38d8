"""Parsing subscriptions: the QEL text form, the SPARQL subset, round trips, and every QueryError."""

import pytest
from hypothesis import given

import qel
from qel import URI, Limits, QueryError
from tests.strategies import subscriptions

DC = "http://purl.org/dc/elements/1.1/"
SPARQL_PREFIXES = "PREFIX dc: <http://purl.org/dc/elements/1.1/>\n"


@given(subscriptions(repeat_predicates=True))
def test_qel_text_round_trips(subscription):
    assert qel.parse_subscription(subscription.to_text()) == subscription


@given(subscriptions(repeat_predicates=True))
def test_sparql_and_qel_forms_compile_alike(subscription):
    assert qel.parse_subscription(subscription.to_sparql()).key == subscription.key


def test_qel_variants_of_the_notation():
    base = qel.parse_subscription(
        'X : t(X, dc:creator, Y), t(X, dc:date, D), (Y contains "a" ; Y contains "b"), D >= 2000'
    )
    variants = [
        'X: t(X, dc:creator, Y), t(X, dc:date, D), (Y contains "a" or Y contains "b") and D >= 2000',
        "?x : t(?x, <http://purl.org/dc/elements/1.1/creator>, ?y), t(?x, dc:date, ?d), "
        '(?y ⊇ "a" ∨ ?y ⊇ "b") ∧ ?d ≥ 2000',
        "@prefix d: <http://purl.org/dc/elements/1.1/> .\n"
        'X : t(X, d:creator, Y), t(X, ⟨d:date⟩, D), (Y contains "a" | Y contains "b"), D >= 2000',
        "PREFIX d: <http://purl.org/dc/elements/1.1/>\n"
        'X : t(X, d:creator, Y), t(X, d:date, D), (Y contains "a" || Y contains "b") && D >= 2000',
    ]
    for text in variants:
        assert qel.parse_subscription(text).key == base.key, text


def test_head_defaults_and_ask_form():
    assert qel.parse_subscription("t(X, dc:creator, Y)").answer == ("X",)
    assert qel.parse_subscription(": t(X, dc:creator, Y)").answer == ()
    assert qel.parse_subscription("X, Y : t(X, dc:creator, Y)").answer == ("X", "Y")
    ask = qel.parse_subscription(SPARQL_PREFIXES + "ASK { ?x dc:creator ?y }")
    assert ask.answer == ()
    star = qel.parse_subscription(SPARQL_PREFIXES + "SELECT * WHERE { ?x dc:creator ?y }")
    assert set(star.answer) == {"x", "y"}


def test_constants_literals_and_dates():
    q = qel.parse_subscription(
        'X : t(X, dc:title, "Algorithms"@en), t(X, dc:date, D), t(X, dc:rights, R), '
        'D >= 2004-01-01, D < 2005-01-01T00:00:00Z, R = "yes"^^xsd:token'
    )
    assert q.patterns[-1].object == qel.Literal("Algorithms", None, "en")
    assert "2004-01-01" in q.to_text()


def test_sparql_rewrites_not_equal_not_and_in():
    rewritten = qel.parse_subscription(
        SPARQL_PREFIXES + "SELECT ?x WHERE { ?x dc:date ?d FILTER(?d != 2004) }"
    )
    explicit = qel.parse_subscription("X : t(X, dc:date, D), (D < 2004 ; D > 2004)")
    assert rewritten.key == explicit.key
    negated = qel.parse_subscription(
        SPARQL_PREFIXES + "SELECT ?x WHERE { ?x dc:date ?d FILTER(!(?d < 5 || ?d >= 10)) }"
    )
    assert negated.key == qel.parse_subscription("X : t(X, dc:date, D), D >= 5, D < 10").key
    within = qel.parse_subscription(
        SPARQL_PREFIXES + "SELECT ?x WHERE { ?x dc:date ?d FILTER(?d IN (1, 2) && 3 > ?d) }"
    )
    assert within.key == qel.parse_subscription("X : t(X, dc:date, D), (D = 1 ; D = 2)").key


def test_sparql_signed_numbers():
    q = qel.parse_subscription(SELECT + "?x dc:date ?d FILTER(?d > -5 && ?d < +7.5) }")
    assert q.key == qel.parse_subscription("X : t(X, dc:date, D), D > -5, D < 7.5").key


def test_sparql_union_over_the_same_patterns_and_str():
    union = qel.parse_subscription(
        SPARQL_PREFIXES
        + 'SELECT ?x WHERE { { ?x dc:creator ?y FILTER(CONTAINS(STR(?y), "a")) } UNION '
        '{ ?x dc:creator ?y FILTER(CONTAINS(?y, "b")) } }'
    )
    explicit = qel.parse_subscription('X : t(X, dc:creator, Y), (Y contains "a" ; Y contains "b")')
    assert union.key == explicit.key


def test_sparql_a_keyword_and_well_known_prefixes_without_declaration():
    q = qel.parse_subscription("SELECT ?x WHERE { ?x a dc:article }")
    assert q.patterns[0].predicate == qel.RDF_TYPE
    assert q.patterns[0].object == URI(DC + "article")


def error_of(text: str, limits: Limits | None = None) -> str:
    with pytest.raises(QueryError) as caught:
        qel.parse_subscription(text, limits=limits or qel.DEFAULT_LIMITS)
    return str(caught.value)


SELECT = SPARQL_PREFIXES + "SELECT ?x WHERE { "


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            SELECT + "?x dc:creator ?y OPTIONAL { ?x dc:title ?t } }",
            "OPTIONAL is not in the language (at line 2, column 36)",
        ),
        (
            SELECT + "{ ?x dc:creator ?y } UNION { ?z dc:title ?t } }",
            "UNION of different graph patterns",
        ),
        (
            SELECT + "?x dc:creator ?y . ?y dc:title ?t }",
            "?y is both an object and a subject: joins on objects are not in the language",
        ),
        (SELECT + "?x dc:creator ?y . ?z dc:title ?y }", "must share one subject variable"),
        (SELECT + "?x ?p ?y }", "?p in predicate position is not in the language"),
        (
            SELECT + '?x dc:creator ?y FILTER(REGEX(?y, "a")) }',
            "REGEX is not in the language (at line 2",
        ),
        (
            SELECT + '?x dc:creator ?y FILTER(?y < "b") }',
            "compares numbers or dates, not the string 'b'",
        ),
        (
            SELECT + '?x dc:creator ?y FILTER(?y != "b") }',
            "the negation of = on the string 'b' is not in the language",
        ),
        (
            SELECT + '?x dc:creator ?y FILTER(!CONTAINS(?y, "b")) }',
            "!CONTAINS (a negated contains) is not in the language",
        ),
        (SELECT + "?x dc:date ?d FILTER(?d > 2004 && ?d < 2000) }", "unsatisfiable"),
        (
            SELECT + "?x dc:date ?d . ?x dc:date2 ?e FILTER(?d < ?e) }",
            "comparing two variables (<) is a join",
        ),
        (SELECT + "?x dc:creator ?y } LIMIT 5", "LIMIT/OFFSET is not in the language (at line 2"),
        (SELECT + "?x dc:creator ?y } ORDER BY ?y", "ORDER BY is not in the language"),
        (SELECT + "?x dc:creator ?y BIND(1 AS ?z) }", "BIND is not in the language"),
        (SELECT + "?x dc:creator/dc:name ?y }", "property paths are not in the language"),
        (
            SELECT + "?x dc:creator ?y FILTER(<http://ex/f>(?y)) }",
            "the function <http://ex/f> is not in the language",
        ),
        (
            SELECT + "?x dc:creator ?y FILTER(?x > 3) }",
            "the subject ?x can only be compared with a URI",
        ),
        (SELECT + "?x dc:creator ?y FILTER(?z = 3) }", "?z does not occur in any triple pattern"),
        (SELECT + "?x dc:date ?d FILTER(?d + 1 > 3) }", "arithmetic"),
        (SELECT + "<http://ex/a> dc:creator ?y }", "the subject must be a variable"),
        (
            SPARQL_PREFIXES + "CONSTRUCT { ?x dc:a ?y } WHERE { ?x dc:creator ?y }",
            "CONSTRUCT queries are not in the language",
        ),
        (SELECT + "?x dc:creator ?y ", "SPARQL syntax error"),
        ("SELECT ?x WHERE { ?x nope:creator ?y }", "SPARQL: Unknown namespace prefix : nope"),
        (
            SELECT + '?x dc:date ?d FILTER(?d = "x"^^<http://www.w3.org/2001/XMLSchema#integer>) }',
            "is not a valid",
        ),
        # QEL text form
        (
            'X : t(X, dc:creator, Y), (t(X, dc:title, T) ; Y contains "a")',
            "a triple pattern inside a disjunction is not in the language",
        ),
        ("X : t(X, dc:creator, Y), t(Z, dc:title, T)", "must share one subject variable"),
        (
            "X : t(X, P, Y)",
            "a variable in predicate position is not in the language (at line 1, column 10)",
        ),
        ("X : t(X, dc:creator, Y), t(X, dc:title, Y)", "joins on objects are not in the language"),
        ("X : t(X, dc:creator, X)", "only joins on the subject are allowed"),
        (
            'X : t(X, dc:creator, Y), Y > "a"',
            "compares numbers or dates, not the string 'a' in a constraint on ?Y (at line 1, column 28)",
        ),
        ("X : t(X, dc:creator, Y), Y contains 5", "contains takes a string"),
        ("X : t(X, zz:creator, Y)", "unknown prefix 'zz'"),
        ("X : t(X, dc:creator, Y), Y = 1, Y = 2", "unsatisfiable"),
        ("X : t(X, dc:creator, Y) Y", "unexpected 'Y'"),
        ("X : t(X, dc:creator, Y), $", "unexpected character '$' (at line 1, column 26)"),
        ("X : Y = 2", "needs at least one triple pattern"),
        (
            "X : t(<http://a/b>, dc:creator, Y)",
            "the subject of a triple pattern must be a variable",
        ),
        ("X : t(X, dc:date, D), D > 1E400", "is not a finite number"),
        ('X : t(X, dc:date, D), D = "x"^^xsd:date', "'x' is not a valid xsd:date"),
        ("Q : t(X, dc:date, D)", "?Q does not occur in any triple pattern"),
    ],
)
def test_query_errors_name_the_construct_and_position(text, expected):
    assert expected in error_of(text)


def test_limits_are_enforced_and_named():
    long_text = "X : t(X, dc:creator, Y), " + ", ".join(f'Y contains "{i}"' for i in range(50))
    assert "max_query_chars" in error_of(long_text, Limits(max_query_chars=100))
    many = "X : " + ", ".join(f"t(X, dc:p{i}, Y{i})" for i in range(5))
    assert "max_patterns" in error_of(many, Limits(max_patterns=4))
    blowup = "X : t(X, dc:d, D), " + ", ".join(f"(D = {i} ; D = {i + 100})" for i in range(10))
    assert "max_disjuncts" in error_of(blowup)
    sparql_blowup = (
        SELECT
        + "?x dc:d ?d FILTER("
        + " && ".join(f"(?d = {i} || ?d = {i + 100})" for i in range(10))
        + ") }"
    )
    assert "max_disjuncts" in error_of(sparql_blowup)
    assert "max_string_chars" in error_of('X : t(X, dc:c, Y), Y contains "' + "a" * 5000 + '"')


def test_non_text_input_is_a_query_error():
    with pytest.raises(QueryError, match="a subscription is text"):
        qel.parse_subscription(b"X : t(X, dc:c, Y)")  # type: ignore[arg-type]


def test_nesting_limits_and_the_glued_head():
    deep = "X : t(X, dc:c, Y), " + "(" * 100 + "Y = 1" + ")" * 100
    assert "max_nesting" in error_of(deep)
    deep_sparql = SELECT + "?x dc:c ?y FILTER(" + "(" * 200 + "?y = 1" + ")" * 200 + ") }"
    assert "nests" in error_of(deep_sparql)
    assert qel.parse_subscription("X:t(X, dc:creator, Y)").answer == ("X",)
    with pytest.raises(qel.AdvertisementError, match="nests too deeply"):
        qel.parse_advertisement('{"values": ' + "[" * 100_000 + "]" * 100_000 + "}")
