"""The design paper's Examples 1-5 (Section 2), word for word."""

import qel
from qel import URI

DC = "http://purl.org/dc/elements/1.1/"

EXAMPLE_1_QEL = (
    "X : t(X, <rdf:type>, <dc:article>), t(X, <dc:creator>, Y), t(X, <dc:date>, D), "
    '(Y ⊇ "Nejdl" ∨ Y ⊇ "Koubarakis"), D = 2004'
)
EXAMPLE_1_SPARQL = """
PREFIX dc: <http://purl.org/dc/elements/1.1/>
PREFIX rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#>
SELECT ?x WHERE { ?x rdf:type dc:article ; dc:creator ?y ; dc:date ?d .
  FILTER ((CONTAINS(?y, "Nejdl") || CONTAINS(?y, "Koubarakis")) && ?d = 2004) }
"""
EXAMPLE_2 = """
@prefix dc: <http://purl.org/dc/elements/1.1/> .
@prefix isl: <http://www.intelligence.tuc.gr/publications/> .
isl:esws04.pdf a dc:article ; dc:creator "Koubarakis" ; dc:date 2004 .
"""


def example_1() -> qel.Subscription:
    return qel.parse_subscription(EXAMPLE_1_QEL)


def test_example_1_in_the_papers_notation_and_in_sparql_are_the_same_subscription():
    from_qel = example_1()
    from_sparql = qel.parse_subscription(EXAMPLE_1_SPARQL)
    assert from_qel.key == from_sparql.key
    assert from_qel.answer == ("X",)
    assert from_sparql.answer == ("x",)


def test_example_1_schemas_and_properties():
    q = example_1()
    assert qel.schemas(q) == {DC}
    assert qel.properties(q) == {URI(DC + "article"), URI(DC + "creator"), URI(DC + "date")}


def test_example_2_publication_matches_example_1():
    [publication] = qel.parse_publications(EXAMPLE_2, "turtle", publisher="C3", id="esws04")
    assert publication.subject == URI("http://www.intelligence.tuc.gr/publications/esws04.pdf")
    assert publication.publisher == "C3"
    assert len(publication.statements) == 3
    assert qel.matches(example_1(), publication)


def test_example_2_changed_year_or_author_no_longer_matches():
    other_year = EXAMPLE_2.replace("2004", "2003")
    other_author = EXAMPLE_2.replace("Koubarakis", "Chirita")
    for document in (other_year, other_author):
        [publication] = qel.parse_publications(document, "turtle")
        assert not qel.matches(example_1(), publication)


def test_example_3_schema_advertisement_covers_example_1():
    ad = qel.parse_advertisement({"schemas": ["dc", "lom"]})
    assert qel.advertisement_covers(ad, example_1())


def test_example_4_property_advertisement_covers_example_1():
    ad = qel.parse_advertisement(
        {"properties": ["dc:article", "dc:creator", "dc:date", "dc:subject", "lom:context"]}
    )
    assert qel.advertisement_covers(ad, example_1())


def test_example_5_property_value_advertisement_covers_example_1():
    ad = qel.parse_advertisement(
        {
            "values": {
                "dc:creator": ["W. Nejdl", "P. Chirita"],
                "dc:title": ["Algorithms", "Data Structures"],
                "dc:year": [{"min": 2002}],
            }
        }
    )
    assert qel.advertisement_covers(ad, example_1())


def test_advertisements_that_do_not_cover_example_1():
    # Wrong schema; a property missing; creators that contain neither name.
    assert not qel.advertisement_covers(qel.parse_advertisement({"schemas": ["foaf"]}), example_1())
    assert not qel.advertisement_covers(
        qel.parse_advertisement({"properties": ["dc:article", "dc:creator"]}), example_1()
    )
    assert not qel.advertisement_covers(
        qel.parse_advertisement({"values": {"dc:creator": ["P. Chirita", "S. Idreos"]}}),
        example_1(),
    )
