"""Reading publications from RDF documents in every supported format, and their text form."""

import json

import pytest
from hypothesis import given

import qel
from qel import URI, Literal, PublicationError
from qel.terms import XSD_INTEGER
from tests.strategies import publications

DC = "http://purl.org/dc/elements/1.1/"
TURTLE = """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
<http://ex/a> a dc:article ; dc:creator "Nejdl"@de ; dc:date 2004 .
<http://ex/b> dc:title "Line one\\nline \\"two\\"" .
"""
NTRIPLES = """<http://ex/a> <http://www.w3.org/1999/02/22-rdf-syntax-ns#type> <http://purl.org/dc/elements/1.1/article> .
<http://ex/a> <http://purl.org/dc/elements/1.1/creator> "Nejdl"@de .
<http://ex/a> <http://purl.org/dc/elements/1.1/date> "2004"^^<http://www.w3.org/2001/XMLSchema#integer> .
<http://ex/b> <http://purl.org/dc/elements/1.1/title> "Line one\\nline \\"two\\"" .
"""
RDFXML = """<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:dc="http://purl.org/dc/elements/1.1/">
  <dc:article rdf:about="http://ex/a">
    <dc:creator xml:lang="de">Nejdl</dc:creator>
    <dc:date rdf:datatype="http://www.w3.org/2001/XMLSchema#integer">2004</dc:date>
  </dc:article>
  <rdf:Description rdf:about="http://ex/b"><dc:title>Line one
line "two"</dc:title></rdf:Description>
</rdf:RDF>"""
JSONLD = json.dumps(
    [
        {
            "@id": "http://ex/a",
            "@type": DC + "article",
            DC + "creator": {"@value": "Nejdl", "@language": "de"},
            DC + "date": {"@value": "2004", "@type": "http://www.w3.org/2001/XMLSchema#integer"},
        },
        {"@id": "http://ex/b", DC + "title": 'Line one\nline "two"'},
    ]
)


@pytest.mark.parametrize(
    ("data", "fmt"),
    [(TURTLE, "turtle"), (NTRIPLES, "nt"), (RDFXML, "xml"), (JSONLD, "json-ld")],
)
def test_every_format_gives_the_same_publications(data, fmt):
    found = qel.parse_publications(data, fmt, publisher="peer-1", id="n7")
    assert [p.id for p in found] == ["n7#1", "n7#2"]
    a, b = found
    assert a.subject == URI("http://ex/a")
    assert a.statements == {
        (qel.RDF_TYPE, URI(DC + "article")),
        (URI(DC + "creator"), Literal("Nejdl", None, "de")),
        (URI(DC + "date"), Literal("2004", XSD_INTEGER)),
    }
    assert b.statements == {(URI(DC + "title"), Literal('Line one\nline "two"'))}
    assert all(p.publisher == "peer-1" for p in found)


def test_single_subject_keeps_the_id_and_content_ids_are_stable():
    [one] = qel.parse_publications('<http://ex/a> <http://ex/p> "v" .', "nt", id="x")
    assert one.id == "x"
    first = qel.parse_publications('<http://ex/a> <http://ex/p> "v" .', "nt")[0].id
    again = qel.parse_publications('<http://ex/a>   <http://ex/p> "v".', "turtle")[0].id
    assert first == again and len(first) == 32


@given(publications())
def test_text_form_round_trips(publication):
    assert qel.parse_publication_text(publication.to_text()) == publication


@pytest.mark.parametrize(
    ("data", "fmt", "message"),
    [
        ("_:b <http://ex/p> 1 .", "turtle", "a blank node is the subject of <http://ex/p>"),
        ("<http://ex/a> <http://ex/p> [ <http://ex/q> 1 ] .", "turtle", "blank node"),
        ("<http://ex/a> <http://ex/p> .", "turtle", "cannot read the turtle document"),
        ("", "turtle", "the document holds no triples"),
        ("<http://ex/a> <http://ex/p> 1 .", "n3-ish", "unknown RDF format 'n3-ish'"),
        ('{"@context": "http://schema.org/", "@id": "http://ex/a"}', "json-ld", "remote @context"),
        ("{nope", "json-ld", "cannot read the JSON-LD document"),
    ],
)
def test_publication_errors(data, fmt, message):
    with pytest.raises(PublicationError) as caught:
        qel.parse_publications(data, fmt)
    assert message in str(caught.value)


def test_publication_limits():
    document = "<http://ex/a> <http://ex/p> " + ", ".join(str(i) for i in range(20)) + " ."
    with pytest.raises(PublicationError, match="max_triples_per_publication"):
        qel.parse_publications(document, limits=qel.Limits(max_triples_per_publication=10))
    with pytest.raises(PublicationError, match="max_document_bytes"):
        qel.parse_publications(document, limits=qel.Limits(max_document_bytes=10))


def test_publication_model_validation():
    with pytest.raises(PublicationError, match="one subject"):
        qel.Publication.of(
            [
                (URI("http://a"), URI("http://p"), Literal("x")),
                (URI("http://b"), URI("http://p"), Literal("x")),
            ]
        )
    with pytest.raises(PublicationError, match="has no triples"):
        qel.Publication(URI("http://a"), frozenset())
