"""RDF for people: the Share page's metadata form as a document, and a publication as something
to read (labels, typed values) on the Inbox and Share pages.

The metadata form describes one resource (a file, usually) with Dublin Core: its identifier
(an IRI; the page offers a fresh ``urn:uuid:``), a class (``dc:article``), title, creators,
date and subjects. ``metadata_document`` writes it as Turtle, which the daemon then publishes as
any document (``peer publish``): the form adds no rule of its own to what may be published.
A date is a year (``2004``, an ``xsd:integer``, as the design paper writes dates) or a day
(``2004-05-31``, an ``xsd:date``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any, Final

import rdflib

import qel
from peer.ui.queries import FormError, expand_iri
from qel.prefixes import WELL_KNOWN, compact
from qel.rdf import to_rdflib
from qel.resources import is_descriptor, resource_of
from qel.terms import RDF_TYPE, URI, XSD_DATE, XSD_INTEGER, Literal

DC: Final = WELL_KNOWN["dc"]
MAX_VALUES: Final = 64
"""Creators or subjects one form may list."""
_YEAR: Final = re.compile(r"-?[0-9]{4}")
_DAY: Final = re.compile(r"-?[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ORDER: Final = {
    RDF_TYPE.value: 0,
    DC + "title": 1,
    DC + "creator": 2,
    DC + "date": 3,
    DC + "subject": 4,
}


def new_identifier() -> str:
    return f"urn:uuid:{uuid.uuid4()}"


def metadata_document(metadata: Mapping[str, Any]) -> str:
    """Turtle describing the resource of ``metadata``; ``FormError`` names a bad field."""
    identifier = _field(metadata, "identifier") or new_identifier()
    subject = expand_iri(identifier, "identifier")
    statements: set[tuple[URI, URI | Literal]] = set()
    kind = _field(metadata, "class")
    if kind:
        statements.add((RDF_TYPE, expand_iri(kind, "class")))
    title = _field(metadata, "title")
    if title:
        statements.add((URI(DC + "title"), Literal(title)))
    for key, predicate in (("creators", "creator"), ("subjects", "subject")):
        for value in _values(metadata, key):
            statements.add((URI(DC + predicate), Literal(value)))
    date = _field(metadata, "date")
    if date:
        if _YEAR.fullmatch(date):
            statements.add((URI(DC + "date"), Literal(str(int(date)), XSD_INTEGER)))
        elif _DAY.fullmatch(date):
            statements.add((URI(DC + "date"), Literal(date, XSD_DATE)))
        else:
            raise FormError("date", f"{date!r} is neither a year (2004) nor a day (2004-05-31)")
    if not statements:
        raise FormError("title", "describe the resource: a title, a creator, a date or a subject")
    graph = rdflib.Graph()
    graph.bind("dc", DC)
    for predicate, obj in sorted(statements, key=lambda s: (_ORDER.get(s[0].value, 9), repr(s))):
        graph.add((rdflib.URIRef(subject.value), rdflib.URIRef(predicate.value), to_rdflib(obj)))
    return graph.serialize(format="turtle")


def _field(metadata: Mapping[str, Any], key: str) -> str:
    value = metadata.get(key) or ""
    if not isinstance(value, str):
        raise FormError(key, f"{key} is a text")
    return value.strip()


def _values(metadata: Mapping[str, Any], key: str) -> list[str]:
    """A list of texts, or one text with a value per line (or separated by ``;``)."""
    value = metadata.get(key) or []
    if isinstance(value, str):
        value = re.split(r"[\n;]", value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FormError(key, f"{key} is a list of texts")
    values = [v.strip() for v in value if v.strip()]
    if len(values) > MAX_VALUES:
        raise FormError(key, f"at most {MAX_VALUES} {key}")
    return values


def readable(ntriples: str) -> dict[str, Any]:
    """What a publication says, for a person: its title, its statements with labels and typed
    values (in a useful order: class, title, creators, date, subjects, the rest), and the file
    it offers (its size and SHA-256), if any. The page formats dates in the reader's locale."""
    publication = qel.parse_publication_text(ntriples)
    rows = [
        {"property": _label(predicate), "iri": predicate.value, **_value(obj)}
        for predicate, obj in publication.statements
        if not is_descriptor(predicate)
    ]
    rows.sort(key=lambda r: (_ORDER.get(r["iri"], len(_ORDER)), r["property"], r["value"]))
    titles = [
        r["value"] for r in rows if r["iri"] in (DC + "title", WELL_KNOWN["dcterms"] + "title")
    ]
    resource = resource_of(publication)
    return {
        "subject": publication.subject.value,
        "title": titles[0]
        if titles
        else compact(publication.subject.value) or publication.subject.value,
        "statements": rows,
        "file": None if resource is None else {"sha256": resource.sha256, "size": resource.size},
    }


def _label(predicate: URI) -> str:
    if predicate == RDF_TYPE:
        return "type"
    short = compact(predicate.value)
    if short is not None:
        return short.partition(":")[2] or short
    return re.split(r"[/#]", predicate.value.rstrip("/#"))[-1] or predicate.value


def _value(term: URI | Literal) -> dict[str, Any]:
    if isinstance(term, URI):
        return {"value": compact(term.value) or term.value, "type": "resource", "full": term.value}
    kinds = {"number": "number", "date": "date", "string": "text"}
    kind = kinds.get(term.kind, "text")
    if kind == "date" and "T" in term.lexical:
        kind = "datetime"
    shown: dict[str, Any] = {"value": term.lexical, "type": kind}
    if term.lang:
        shown["lang"] = term.lang
    return shown


def turtle_of(ntriples: str) -> str:
    """A publication's canonical text (N-Triples) as Turtle with the well-known prefixes, to
    edit a new version or an extension of it."""
    graph = rdflib.Graph()
    for name, base in WELL_KNOWN.items():
        graph.bind(name, base)
    publication = qel.parse_publication_text(ntriples)
    subject = rdflib.URIRef(publication.subject.value)
    for predicate, obj in publication.statements:
        if not is_descriptor(predicate):
            graph.add((subject, rdflib.URIRef(predicate.value), to_rdflib(obj)))
    return graph.serialize(format="turtle")
