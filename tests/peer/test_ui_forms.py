"""The Follow page's form and the Share page's metadata form (``peer.ui.queries``,
``peer.ui.documents``): what the form makes is what the language reads, and means what the form
says. The oracle for the meaning is a publication built to satisfy each condition: it must match,
and it must stop matching when any one property the form asks for is missing."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import qel
from peer.ui.documents import metadata_document, readable, turtle_of
from peer.ui.queries import FormError, build_query, check_query, error_position, infer_type
from qel.terms import XSD_DATE, XSD_DECIMAL, XSD_INTEGER, Literal

DC = "http://purl.org/dc/elements/1.1/"
PROPERTIES = ["dc:creator", "dc:title", "dc:date", "dc:subject", "http://example.org/issued"]
CLASSES = ["", "dc:article", "dc:book", "http://example.org/Thesis"]
SUBJECT = qel.URI("http://example.org/paper")


def iri(text: str) -> qel.URI:
    prefix, _, local = text.partition(":")
    return qel.URI(DC + local if prefix == "dc" else text)


texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12
).filter(str.strip)
numbers = st.one_of(
    st.integers(-10_000, 10_000).map(Fraction),
    st.integers(-10_000, 10_000).map(lambda n: Fraction(n, 100)),
)
dates = st.dates(min_value=dt.date(1900, 1, 2), max_value=dt.date(2099, 12, 30))


def number_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):.2f}"


def number_literal(value: Fraction) -> Literal:
    if value.denominator == 1:
        return Literal(str(value.numerator), XSD_INTEGER)
    return Literal(f"{float(value):.2f}", XSD_DECIMAL)


@st.composite
def conditions(draw: st.DrawFn) -> tuple[dict, Literal]:
    """A condition of the form, and an object value that satisfies it."""
    prop = draw(st.sampled_from(PROPERTIES))
    kind = draw(st.sampled_from(["text", "number", "date", "exists"]))
    if kind == "exists":
        return {"property": prop, "operator": "exists"}, Literal("anything")
    if kind == "text":
        operator = draw(st.sampled_from(["contains", "="]))
        values = draw(st.lists(texts, min_size=1, max_size=3))
        chosen = draw(st.sampled_from(values))
        return (
            {"property": prop, "operator": operator, "values": values, "type": "text"},
            Literal(chosen.strip() + ("!" if operator == "contains" else "")),
        )
    operator = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "between"]))
    if kind == "number":
        low, high = sorted(draw(st.lists(numbers, min_size=2, max_size=2)))
        shown, step, literal = number_text, Fraction(1), number_literal
        low, high = Fraction(number_text(low)), Fraction(number_text(high))
    else:
        low, high = sorted(draw(st.lists(dates, min_size=2, max_size=2)))
        shown, step = (lambda d: d.isoformat()), dt.timedelta(days=1)

        def literal(value: dt.date) -> Literal:
            return Literal(value.isoformat(), XSD_DATE)

    satisfying = {
        "=": low,
        "!=": low + step,
        "<": low - step,
        "<=": low,
        ">": low + step,
        ">=": low,
        "between": low,
    }[operator]
    values = [shown(low), shown(high)] if operator == "between" else [shown(low)]
    condition = {"property": prop, "operator": operator, "values": values, "type": kind}
    if draw(st.booleans()) and operator != "between":
        condition["type"] = "auto"
    return condition, literal(satisfying)


@given(st.sampled_from(CLASSES), st.lists(conditions(), min_size=0, max_size=4))
def test_a_form_means_what_it_says(kind, drawn):
    if not kind and not drawn:
        return
    form = {"class": kind, "conditions": [condition for condition, _ in drawn]}
    query = check_query(build_query(form))
    subscription = qel.parse_subscription(query.qel)
    assert qel.parse_subscription(query.sparql).key == subscription.key
    statements = {(iri(c["property"]), value) for c, value in drawn}
    if kind:
        statements.add((qel.RDF_TYPE, iri(kind)))
    assert qel.matches(subscription, qel.Publication(SUBJECT, frozenset(statements)))
    for missing in {p for p, _ in statements}:
        kept = frozenset((p, o) for p, o in statements if p != missing)
        if kept:
            assert not qel.matches(subscription, qel.Publication(SUBJECT, kept)), missing


def test_the_papers_example_from_the_form():
    form = {
        "class": "dc:article",
        "conditions": [
            {"property": "dc:creator", "operator": "contains", "values": ["Nejdl", "Koubarakis"]},
            {"property": "dc:date", "operator": "=", "values": ["2004"]},
        ],
    }
    assert build_query(form) == (
        "X : t(X, rdf:type, dc:article), t(X, dc:creator, V1), t(X, dc:date, V2), "
        '(V1 contains "Nejdl" ; V1 contains "Koubarakis"), V2 = 2004'
    )


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({}, "class", "say what to follow"),
        ({"class": "ex:thing"}, "class", "neither prefix:name"),
        ({"conditions": [{"operator": "contains", "values": ["x"]}]}, "conditions.0.property", "which property"),
        ({"conditions": [{"property": "dc:title", "operator": "~", "values": ["x"]}]}, "conditions.0.operator", "one of"),
        ({"conditions": [{"property": "dc:title", "operator": "=", "values": [" "]}]}, "conditions.0.values.0", "give a value"),
        ({"conditions": [{"property": "dc:date", "operator": "=", "type": "date", "values": ["31/05/2004"]}]}, "conditions.0.values.0", "not a date"),
        ({"conditions": [{"property": "dc:date", "operator": "between", "values": ["2004"]}]}, "conditions.0.values", "two values"),
        ({"conditions": [{"property": "dc:date", "operator": ">", "values": ["1", "x"], "type": "number"}]}, "conditions.0.values.1", "not a number"),
        ({"conditions": [{}] * 33}, "conditions", "at most 32"),
    ],
)  # fmt: skip
def test_a_bad_field_is_named(form, field, message):
    with pytest.raises(FormError, match=message) as caught:
        build_query(form)
    assert caught.value.field == field


def test_values_are_read_as_what_they_look_like_unless_the_form_says():
    assert [infer_type(v) for v in ("2004", "-2.5", "2004-05-31", "2004-05-31T10:00", "dc:book", "ex:x", "Nejdl")] == [
        "number", "number", "date", "date", "resource", "text", "text",
    ]  # fmt: skip
    query = build_query(
        {"conditions": [{"property": "dc:date", "operator": ">=", "values": ["2004-05-31T10:00"]}]}
    )
    assert query.endswith("V1 >= 2004-05-31T10:00:00"), "a browser's date-time field has no seconds"
    text = build_query(
        {
            "conditions": [
                {"property": "dc:title", "operator": "=", "type": "text", "values": ["2004"]}
            ]
        }
    )
    assert text.endswith('V1 = "2004"')


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("X : t(X, dc:title, T),\n T contains", (2, 12)),
        ("X : t(X, dc:title, T), T ~ 1", (1, 26)),
        ("SELECT ?x WHERE {\n ?x dc:title ?t .\n FILTER (?t > ) }", (3, 15)),
        ("SELECT ?x WHERE { ?x ?p ?t }", None),
    ],
)
def test_errors_say_where_the_parser_stopped(text, where):
    with pytest.raises(qel.QueryError) as caught:
        check_query(text)
    found = error_position(str(caught.value))
    if where is None:
        return
    assert found is not None
    assert found[0] == where[0]


def test_the_metadata_form_makes_a_document_the_daemon_publishes():
    document = metadata_document(
        {
            "identifier": "http://example.org/papers/p1.pdf",
            "class": "dc:article",
            "title": 'Super-peers: "a" design',
            "creators": "W. Nejdl\n P. Chirita \n",
            "date": "2004",
            "subjects": ["p2p", "rdf"],
        }
    )
    [publication] = qel.parse_publications(document, "turtle", publisher="me", id="p1")
    assert publication.subject == qel.URI("http://example.org/papers/p1.pdf")
    assert publication.statements == {
        (qel.RDF_TYPE, qel.URI(DC + "article")),
        (qel.URI(DC + "title"), Literal('Super-peers: "a" design')),
        (qel.URI(DC + "creator"), Literal("W. Nejdl")),
        (qel.URI(DC + "creator"), Literal("P. Chirita")),
        (qel.URI(DC + "date"), Literal("2004", XSD_INTEGER)),
        (qel.URI(DC + "subject"), Literal("p2p")),
        (qel.URI(DC + "subject"), Literal("rdf")),
    }
    day = metadata_document({"title": "t", "date": "2004-05-31"})
    [dated] = qel.parse_publications(day, "turtle", publisher="me", id="p2")
    assert (qel.URI(DC + "date"), Literal("2004-05-31", XSD_DATE)) in dated.statements
    assert dated.subject.value.startswith("urn:uuid:"), "a fresh identifier when none is given"
    with pytest.raises(FormError, match="neither a year"):
        metadata_document({"title": "t", "date": "May 2004"})
    with pytest.raises(FormError, match="describe the resource"):
        metadata_document({"identifier": "urn:x:1"})
    with pytest.raises(FormError) as caught:
        metadata_document({"identifier": "not an iri", "title": "t"})
    assert caught.value.field == "identifier"


def test_a_publication_reads_in_a_useful_order_and_edits_as_turtle():
    document = metadata_document(
        {"identifier": "urn:x:1", "title": "T", "creators": "B\nA", "date": "2004-05-31",
         "class": "dc:book", "subjects": "s"}
    )  # fmt: skip
    [publication] = qel.parse_publications(
        document
        + '<urn:x:1> <http://example.org/pages> 12 ; <http://purl.org/dc/elements/1.1/language> "en"@en .',
        "turtle",
        publisher="me",
        id="x",
    )
    shown = readable(publication.to_text())
    assert shown["title"] == "T"
    assert [(s["property"], s["value"], s["type"]) for s in shown["statements"]] == [
        ("type", "dc:book", "resource"),
        ("title", "T", "text"),
        ("creator", "A", "text"),
        ("creator", "B", "text"),
        ("date", "2004-05-31", "date"),
        ("subject", "s", "text"),
        ("language", "en", "text"),
        ("pages", "12", "number"),
    ]
    assert shown["file"] is None
    [again] = qel.parse_publications(
        turtle_of(publication.to_text()), "turtle", publisher="me", id="x"
    )
    assert again.statements == publication.statements
