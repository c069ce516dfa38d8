"""Reading publications from RDF documents (Turtle, N-Triples, RDF/XML, JSON-LD) via rdflib, and the
publication's canonical text form.

One ``Publication`` per subject of the document. Blank-node subjects are refused: a publication
announces a resource that subscribers will later fetch by its URI, so the resource needs one
(the error says which blank node). Blank nodes in object position are refused for the same reason:
the language cannot match into them. JSON-LD is read with remote contexts disabled, so a document
never makes the reader open a network connection.

The canonical text form is N-Triples, sorted, preceded by one comment line
``# publication {"id": ..., "publisher": ...}``; it is also a valid N-Triples document.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Iterable

import rdflib
from rdflib.term import BNode as RdfBNode
from rdflib.term import Literal as RdfLiteral
from rdflib.term import URIRef as RdfURIRef

from qel.errors import PublicationError, QelError
from qel.limits import DEFAULT_LIMITS, Limits
from qel.model import Publication
from qel.terms import URI, Literal, Term

FORMATS = {
    "turtle": "turtle",
    "ttl": "turtle",
    "nt": "nt",
    "ntriples": "nt",
    "n-triples": "nt",
    "xml": "xml",
    "rdf/xml": "xml",
    "rdfxml": "xml",
    "json-ld": "json-ld",
    "jsonld": "json-ld",
}
_HEADER = "# publication "


def from_rdflib(node: object) -> Term:
    if isinstance(node, RdfURIRef):
        return URI(str(node))
    if isinstance(node, RdfLiteral):
        datatype = str(node.datatype) if node.datatype is not None else None
        return Literal(str(node), datatype, node.language)
    raise PublicationError(f"unsupported RDF term {node!r}")


def to_rdflib(term: Term) -> RdfURIRef | RdfLiteral:
    if isinstance(term, URI):
        return RdfURIRef(term.value)
    if term.lang is not None:
        return RdfLiteral(term.lexical, lang=term.lang)
    datatype = RdfURIRef(term.datatype) if term.datatype is not None else None
    return RdfLiteral(term.lexical, datatype=datatype, normalize=False)


def parse_publications(
    data: str | bytes,
    format: str = "turtle",
    *,
    publisher: str = "",
    id: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Publication]:
    """The publications a document describes, one per subject, sorted by subject URI.

    ``id`` names the publication when the document has one subject; with several, each gets
    ``id#1``, ``id#2``, ... in subject order. Without ``id``, a publication's id is a hash of its
    triples, so the same content always gets the same id.
    """
    graph = read_graph(data, format, limits, PublicationError)
    by_subject: dict[URI, set[tuple[URI, Term]]] = {}
    for subject, predicate, obj in graph:
        if isinstance(subject, RdfBNode):
            raise PublicationError(
                f"a blank node is the subject of <{predicate}>: a published resource needs a URI"
            )
        if isinstance(obj, RdfBNode):
            raise PublicationError(
                f"<{subject}> <{predicate}> has a blank node as object: describe the resource "
                "with its own URI"
            )
        statements = by_subject.setdefault(URI(str(subject)), set())
        statements.add((URI(str(predicate)), from_rdflib(obj)))
        if len(statements) > limits.max_triples_per_publication:
            raise PublicationError(
                f"<{subject}> has more than {limits.max_triples_per_publication} triples "
                "(max_triples_per_publication)"
            )
    if not by_subject:
        raise PublicationError("the document holds no triples")
    subjects = sorted(by_subject, key=lambda s: s.value)
    result = []
    for number, subject in enumerate(subjects, start=1):
        statements = frozenset(by_subject[subject])
        if id is None:
            name = content_id(subject, statements)
        else:
            name = id if len(subjects) == 1 else f"{id}#{number}"
        result.append(Publication(subject, statements, publisher, name))
    return result


def read_graph(
    data: str | bytes, format: str, limits: Limits, error: type[QelError]
) -> rdflib.Graph:
    """The RDF graph of a document (publications and schemas alike), within ``limits``;
    ``error`` (the caller's kind of input) says what is wrong with it."""
    rdf_format = FORMATS.get(format.lower())
    if rdf_format is None:
        known = ", ".join(sorted(set(FORMATS.values())))
        raise error(f"unknown RDF format {format!r} (known: {known})")
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > limits.max_document_bytes:
        raise error(
            f"the document is larger than {limits.max_document_bytes} bytes (max_document_bytes)"
        )
    graph = rdflib.Graph()
    try:
        if rdf_format == "json-ld":
            _parse_json_ld(graph, raw, error)
        else:
            graph.parse(data=raw, format=rdf_format)
    except QelError:
        raise
    except Exception as problem:  # rdflib's parsers raise many unrelated types for bad syntax
        raise error(f"cannot read the {rdf_format} document: {problem}") from None
    return graph


def _parse_json_ld(graph: rdflib.Graph, raw: bytes, error: type[QelError]) -> None:
    try:
        document = json.loads(raw)
    except ValueError as problem:
        raise error(f"cannot read the JSON-LD document: {problem}") from None
    if _has_remote_context(document):
        raise error(
            "the JSON-LD document refers to a remote @context; inline the context "
            "(remote contexts are not fetched)"
        )
    with warnings.catch_warnings():
        # rdflib's JSON-LD reader uses its own deprecated ConjunctiveGraph internally.
        warnings.filterwarnings("ignore", "ConjunctiveGraph is deprecated", DeprecationWarning)
        graph.parse(data=json.dumps(document), format="json-ld")


def _has_remote_context(node: object) -> bool:
    if isinstance(node, dict):
        context = node.get("@context")
        if isinstance(context, str) or (
            isinstance(context, list) and any(isinstance(c, str) for c in context)
        ):
            return True
        return any(_has_remote_context(value) for value in node.values())
    if isinstance(node, list):
        return any(_has_remote_context(value) for value in node)
    return False


def content_id(subject: URI, statements: Iterable[tuple[URI, Term]]) -> str:
    lines = sorted(_nt_line(subject, p, o) for p, o in statements)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:32]


_NT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NT_LINE = re.compile(
    r'\s*<([^>]*)>\s+<([^>]*)>\s+(?:<([^>]*)>|"((?:[^"\\]|\\.)*)"(?:@([A-Za-z]+(?:-[A-Za-z0-9]+)*)'
    r"|\^\^<([^>]*)>)?)\s*\.\s*"
)
_NT_UNESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")


_TEXT_SPECIAL = re.compile(r'[\\"\x00-\x1f]')
_IRI_SPECIAL = re.compile(r'[<>"{}|^`\\\x00-\x20]')


def _escape_text(text: str) -> str:
    # most literals need no escape: one regex scan instead of a Python step per character
    # (an access point writes every publication it originates in this form)
    return _TEXT_SPECIAL.sub(
        lambda match: _NT_ESCAPES.get(match[0]) or f"\\u{ord(match[0]):04X}", text
    )


def _escape_iri(iri: str) -> str:
    return _IRI_SPECIAL.sub(lambda match: f"\\u{ord(match[0]):04X}", iri)


def _unescape(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        short, long, char = match.groups()
        if short or long:
            return chr(int(short or long, 16))
        mapping = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
        return mapping.get(char, char)

    return _NT_UNESCAPE.sub(replace, text)


def _nt_term(term: Term) -> str:
    if isinstance(term, URI):
        return f"<{_escape_iri(term.value)}>"
    quoted = f'"{_escape_text(term.lexical)}"'
    if term.lang is not None:
        return f"{quoted}@{term.lang}"
    if term.datatype is not None:
        return f"{quoted}^^<{_escape_iri(term.datatype)}>"
    return quoted


def _nt_line(subject: URI, predicate: URI, obj: Term) -> str:
    return f"{_nt_term(subject)} {_nt_term(predicate)} {_nt_term(obj)} ."


def format_publication(publication: Publication) -> str:
    header = _HEADER + json.dumps(
        {"id": publication.id, "publisher": publication.publisher}, sort_keys=True
    )
    lines = sorted(_nt_line(publication.subject, p, o) for p, o in publication.statements)
    return "\n".join([header, *lines]) + "\n"


def parse_publication_text(text: str, *, limits: Limits = DEFAULT_LIMITS) -> Publication:
    """Reads ``format_publication``'s output back, term for term (no lexical normalisation)."""
    if len(text) > limits.max_document_bytes:
        raise PublicationError(
            f"the text is larger than {limits.max_document_bytes} bytes (max_document_bytes)"
        )
    first, _, body = text.partition("\n")
    if not first.startswith(_HEADER):
        raise PublicationError(f"a publication text starts with {_HEADER.strip()!r}")
    try:
        header = json.loads(first[len(_HEADER) :])
        name, publisher = str(header["id"]), str(header["publisher"])
    except (ValueError, KeyError, TypeError):
        raise PublicationError("malformed publication header line") from None
    triples = []
    for number, line in enumerate(body.splitlines(), start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _NT_LINE.fullmatch(line)
        if match is None:
            raise PublicationError(f"line {number} is not an N-Triples statement")
        subject, predicate, iri, lexical, lang, datatype = match.groups()
        if iri is not None:
            obj: Term = URI(_unescape(iri))
        else:
            obj = Literal(_unescape(lexical), _unescape(datatype) if datatype else None, lang)
        triples.append((URI(_unescape(subject)), URI(_unescape(predicate)), obj))
    if len(triples) > limits.max_triples_per_publication:
        raise PublicationError(
            f"more than {limits.max_triples_per_publication} triples (max_triples_per_publication)"
        )
    return Publication.of(triples, publisher=publisher, id=name)
