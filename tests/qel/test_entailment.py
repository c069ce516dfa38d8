"""RDFS entailment before matching (``qel.entailment``), against an independent closure (rdflib and
owlrl, ``tests.entailment_oracle``): the closure itself, covering under it, and the closure of
advertisement elements that keeps routing complete."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import qel
from qel.advertisements import element_allows_triple
from qel.resources import SHA256, SIZE, Resource, with_resource
from tests.entailment_oracle import closure, schema_graph
from tests.strategies import (
    advertisements,
    schema_axioms,
    schema_text,
    self_describing_publications,
    subscriptions,
)

RDFS = "http://www.w3.org/2000/01/rdf-schema#"
RDF_TYPE_IRI = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
EX = "http://example.org/"
DC = "http://purl.org/dc/elements/1.1/"


def _schema(axioms: frozenset[qel.Axiom]) -> tuple[qel.Schema, object]:
    """The implementation's schema, read back from the document, and the oracle's graph."""
    text = schema_text(axioms)
    parsed = qel.parse_schema(text, "nt")
    assert parsed == axioms
    return qel.Schema(parsed), schema_graph([(text, "nt")])


@pytest.mark.slow
@settings(max_examples=200)
@given(schema_axioms(), self_describing_publications())
def test_the_closure_is_owlrls_rdfs_closure_about_the_subject(axioms, publication):
    schema, graph = _schema(axioms)
    assert schema.entail(publication) == closure(publication, graph)


@pytest.mark.slow
@settings(max_examples=200)
@given(schema_axioms(), self_describing_publications(), subscriptions(max_patterns=2))
def test_matching_the_closure_is_matching_owlrls_closure(axioms, publication, subscription):
    schema, graph = _schema(axioms)
    assert qel.matches(subscription, schema.entail(publication)) == qel.matches(
        subscription, closure(publication, graph)
    )


@pytest.mark.slow
@settings(max_examples=200)
@given(
    schema_axioms(),
    self_describing_publications(),
    subscriptions(max_patterns=2, repeat_predicates=True),
    subscriptions(max_patterns=2, repeat_predicates=True),
)
def test_covering_stays_sound_under_entailment(axioms, publication, general, specific):
    """Subscriptions are not rewritten: what covers a subscription matches every closed
    publication it matches (the closure is a publication like any other)."""
    assume(qel.covers(general, specific))
    _, graph = _schema(axioms)
    entailed = closure(publication, graph)
    if qel.matches(specific, entailed):
        assert qel.matches(general, entailed)


@pytest.mark.slow
@settings(max_examples=300)
@given(
    schema_axioms(),
    advertisements(),
    self_describing_publications(),
    subscriptions(max_patterns=2, repeat_predicates=True),
)
def test_closed_elements_allow_the_closure_of_what_the_advertisement_allows(
    axioms, advertisement, publication, subscription
):
    """The origin announces its elements closed under its schema: every triple of the closure
    of a publication its advertisement allows is allowed, and every subscription the closure
    matches is covered (so it travels toward the publisher)."""
    allowed = frozenset(
        (p, o)
        for p, o in publication.statements
        if any(element_allows_triple(e, p, o) for e in advertisement.elements)
    )
    assume(allowed)
    publication = qel.Publication(publication.subject, allowed, publication.publisher, "n")
    schema, graph = _schema(axioms)
    closed = schema.close(advertisement.elements)
    entailed = closure(publication, graph)
    assert all(
        any(element_allows_triple(element, p, o) for element in closed)
        for p, o in entailed.statements
    )
    if qel.matches(subscription, entailed):
        assert qel.elements_cover(closed, subscription)


@given(advertisements())
def test_an_empty_schema_changes_nothing(advertisement):
    assert qel.Schema().close(advertisement.elements) == advertisement.elements


def test_a_subclass_instance_matches_a_subscription_on_the_superclass():
    schema = qel.Schema(
        qel.parse_schema(
            f"@prefix ex: <{EX}> . @prefix rdfs: <{RDFS}> . @prefix dc: <{DC}> .\n"
            "ex:Article rdfs:subClassOf ex:Document . ex:Document rdfs:subClassOf ex:Work .\n"
            "ex:author rdfs:subPropertyOf dc:creator . ex:author rdfs:domain ex:Work .\n"
            "ex:Article a rdfs:Class ; rdfs:label 'Article' .\n"
        )
    )
    [publication] = qel.parse_publications(
        f'<{EX}doc> a <{EX}Article> ; <{EX}author> "Nejdl" .', publisher="p", id="n"
    )
    works = qel.parse_subscription(f"X : t(X, rdf:type, <{EX}Work>)")
    by_nejdl = qel.parse_subscription('X : t(X, dc:creator, Y), Y contains "Nejdl"')
    resource = qel.parse_subscription("X : t(X, rdf:type, rdfs:Resource)")
    entailed = schema.entail(publication)
    assert qel.matches(works, entailed) and qel.matches(by_nejdl, entailed)
    assert not qel.matches(works, publication)
    assert not qel.matches(resource, entailed)  # true of everything: not entailed


def test_a_range_types_the_subject_only_when_it_is_the_object():
    schema = qel.Schema(qel.parse_schema(f"<{EX}cites> <{RDFS}range> <{EX}Cited> .", "nt"))
    cited = qel.parse_subscription(f"X : t(X, rdf:type, <{EX}Cited>)")
    [other] = qel.parse_publications(f"<{EX}a> <{EX}cites> <{EX}b> .", "nt", id="n")
    [itself] = qel.parse_publications(f"<{EX}a> <{EX}cites> <{EX}a> .", "nt", id="n")
    assert not qel.matches(cited, schema.entail(other))
    assert qel.matches(cited, schema.entail(itself))


def test_a_resource_descriptor_is_never_entailed():
    for predicate in (SHA256, SIZE):
        for text in (
            f"<{predicate.value}> <{RDFS}subPropertyOf> <{EX}p> .",
            f"<{EX}p> <{RDFS}subPropertyOf> <{predicate.value}> .",
            f"<{predicate.value}> <{RDFS}domain> <{EX}C> .",
        ):
            with pytest.raises(qel.SchemaError, match="descriptor is never entailed"):
                qel.parse_schema(text, "nt")
    schema = qel.Schema(qel.parse_schema(f"<{EX}p> <{RDFS}domain> <{EX}C> .", "nt"))
    [publication] = qel.parse_publications(f'<{EX}a> <{EX}q> "x" .', "nt", id="n")
    described = with_resource(publication, Resource(sha256="0" * 64, size=3))
    assert schema.entail(described) == described


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f'<{EX}a> <{EX}b> "c" .', "is not a schema statement"),
        (f"<{EX}a> <{RDFS}subClassOf> _:b .", "blank node"),
        (f'<{EX}a> <{RDFS}subClassOf> "C" .', "class or property URI"),
        (f"<{EX}p> <{RDFS}subPropertyOf> <{RDFS}subClassOf> .", "own vocabulary"),
        (f"<{EX}C> <{RDF_TYPE_IRI}> <{RDFS}Class> .", "no schema axioms"),
        (f"<{EX}a> <{RDFS}subClassOf", "cannot read the nt document"),
    ],
)
def test_a_malformed_schema_is_refused_with_the_reason(text, reason):
    with pytest.raises(qel.SchemaError, match=reason):
        qel.parse_schema(text, "nt")


def test_a_schema_beyond_max_schema_axioms_is_refused():
    text = "".join(f"<{EX}C{i}> <{RDFS}subClassOf> <{EX}D> .\n" for i in range(4))
    with pytest.raises(qel.SchemaError, match=r"more than 3 axioms \(max_schema_axioms\)"):
        qel.parse_schema(text, "nt", limits=qel.Limits(max_schema_axioms=3))
    assert len(qel.parse_schema(text, "nt", limits=qel.Limits(max_schema_axioms=4))) == 4


@given(st.data())
def test_entailment_is_idempotent(data):
    schema, _ = _schema(data.draw(schema_axioms()))
    publication = data.draw(self_describing_publications())
    once = schema.entail(publication)
    assert schema.entail(once) == once
