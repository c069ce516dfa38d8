"""An independent RDFS closure for the oracles: rdflib graphs and owlrl's RDFS semantics,
nothing of ``qel.entailment``.

The closure of a publication under schema documents is what owlrl's RDFS closure of the
publication's triples and the documents (read by rdflib, as they were written) says about the
publication's subject, less ``rdf:type rdfs:Resource``, which RDFS entails of everything (the
entailment regime the network documents leaves the rules that hold of every resource out).

Literals stand in the graph as placeholder URIs, put back afterwards: RDFS entails nothing from a
literal's value, and owlrl's own treatment of literals merges those that differ only in their
language tag, which would make the oracle's versions differ from the published ones in form.
"""

from __future__ import annotations

from collections.abc import Iterable

import owlrl
import rdflib
from rdflib.namespace import RDF, RDFS

import qel
from qel.rdf import FORMATS, from_rdflib, to_rdflib


def schema_graph(documents: Iterable[tuple[str, str]]) -> rdflib.Graph:
    """The documents' triples, as rdflib reads them (``(data, format)`` pairs)."""
    graph = rdflib.Graph()
    for data, format in documents:
        graph.parse(data=data, format=FORMATS[format.lower()])
    return graph


def closure(publication: qel.Publication, schema: rdflib.Graph) -> qel.Publication:
    """The publication with what RDFS entails about its subject under ``schema``."""
    graph = rdflib.Graph()
    for triple in schema:
        graph.add(triple)
    subject = rdflib.URIRef(publication.subject.value)
    literals: dict[rdflib.URIRef, qel.Literal] = {}
    for predicate, obj in publication.statements:
        node = to_rdflib(obj)
        if isinstance(obj, qel.Literal):
            node = rdflib.URIRef(f"urn:oracle:literal:{len(literals)}")
            literals[node] = obj
        graph.add((subject, rdflib.URIRef(predicate.value), node))
    owlrl.DeductiveClosure(
        owlrl.RDFS_Semantics, axiomatic_triples=False, datatype_axioms=False
    ).expand(graph)
    statements = set()
    for predicate, obj in graph.predicate_objects(subject):
        if predicate == RDF.type and obj == RDFS.Resource:
            continue
        assert not isinstance(obj, rdflib.BNode), f"owlrl entailed a blank node: {predicate}"
        term = literals.get(obj) if isinstance(obj, rdflib.URIRef) else None
        statements.add((qel.URI(str(predicate)), term or from_rdflib(obj)))
    return qel.Publication(
        publication.subject, frozenset(statements), publication.publisher, publication.id
    )
