"""RDFS schemas as peers publish them (seed 000): the four kinds of axiom entailment uses, read
from an RDF document.

A schema document holds ``rdfs:subClassOf``, ``rdfs:subPropertyOf``, ``rdfs:domain`` and
``rdfs:range`` statements between URIs. Declarations (``ex:C a rdfs:Class``, ``ex:p a
rdf:Property`` and their OWL spellings) and annotations (labels, comments) are accepted and
dropped: they entail nothing about a published resource. Anything else is refused, so that a
document sent as a schema by mistake (data, or OWL beyond declarations) says so instead of being
half applied.

Axioms about RDF's and RDFS's own vocabulary (``rdf:type rdfs:subPropertyOf ...``, ``ex:p
rdfs:subPropertyOf rdfs:subClassOf``) are refused: they would change what the four rules mean
and make a publication's closure depend on the schema's own closure. So are axioms about the
predicates that describe a downloadable resource (``qel.resources``): a resource's hash and size
are never entailed into anything, nor from anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rdflib.term import BNode as RdfBNode
from rdflib.term import URIRef as RdfURIRef

from qel.errors import SchemaError
from qel.limits import DEFAULT_LIMITS, Limits
from qel.rdf import read_graph
from qel.resources import DESCRIPTOR_PREDICATES
from qel.terms import RDF, URI, namespace

RDFS: Final = "http://www.w3.org/2000/01/rdf-schema#"
OWL: Final = "http://www.w3.org/2002/07/owl#"
SUBCLASS: Final = "subClassOf"
SUBPROPERTY: Final = "subPropertyOf"
DOMAIN: Final = "domain"
RANGE: Final = "range"
KINDS: Final = (SUBCLASS, SUBPROPERTY, DOMAIN, RANGE)
_RESERVED: Final = frozenset({RDF, RDFS})
_DECLARATIONS: Final = frozenset(
    {
        RDFS + "Class",
        RDF + "Property",
        OWL + "Class",
        OWL + "ObjectProperty",
        OWL + "DatatypeProperty",
        OWL + "AnnotationProperty",
        OWL + "Ontology",
    }
)
_ANNOTATIONS: Final = frozenset(
    {RDFS + "label", RDFS + "comment", RDFS + "seeAlso", RDFS + "isDefinedBy", OWL + "versionInfo"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Axiom:
    """``subject`` ``rdfs:<kind>`` ``object``: a class under a class (``subClassOf``), a
    property under a property (``subPropertyOf``), or a property's domain or range class."""

    kind: str
    subject: URI
    object: URI

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SchemaError(f"an axiom is one of {', '.join(KINDS)}, not {self.kind!r}")
        for term in (self.subject, self.object):
            if not isinstance(term, URI):
                raise SchemaError(f"an axiom relates URIs, got {term!r}")
        for term in (self.subject, self.object):
            if namespace(term) in _RESERVED:
                raise SchemaError(
                    f"{self.text()}: axioms about RDF's and RDFS's own vocabulary are not "
                    "accepted (their meaning is fixed)"
                )
            if term in DESCRIPTOR_PREDICATES:
                raise SchemaError(
                    f"{self.text()}: a resource's descriptor is never entailed (qel.resources)"
                )

    def text(self) -> str:
        return f"<{self.subject.value}> rdfs:{self.kind} <{self.object.value}>"


def parse_schema(
    data: str | bytes, format: str = "turtle", *, limits: Limits = DEFAULT_LIMITS
) -> frozenset[Axiom]:
    """The axioms of a schema document (see the module docstring); ``SchemaError`` with the
    reason when it is not one."""
    graph = read_graph(data, format, limits, SchemaError)
    axioms: set[Axiom] = set()
    for subject, predicate, obj in sorted(graph):
        name = str(predicate)
        statement = f"<{subject}> <{predicate}> {obj.n3()}"
        if name in _ANNOTATIONS or (name == RDF + "type" and str(obj) in _DECLARATIONS):
            continue
        if not name.startswith(RDFS) or name.removeprefix(RDFS) not in KINDS:
            raise SchemaError(
                f"{statement} is not a schema statement: a schema holds rdfs:subClassOf, "
                "rdfs:subPropertyOf, rdfs:domain and rdfs:range axioms (publish data with "
                "'peer publish')"
            )
        if isinstance(subject, RdfBNode) or isinstance(obj, RdfBNode):
            raise SchemaError(f"{statement} has a blank node: name the class or property")
        if not isinstance(obj, RdfURIRef):
            raise SchemaError(f"{statement}: the object of an axiom is a class or property URI")
        axioms.add(
            Axiom(kind=name.removeprefix(RDFS), subject=URI(str(subject)), object=URI(str(obj)))
        )
        if len(axioms) > limits.max_schema_axioms:
            raise SchemaError(
                f"the schema has more than {limits.max_schema_axioms} axioms (max_schema_axioms)"
            )
    if not axioms:
        raise SchemaError("the document holds no schema axioms")
    return frozenset(axioms)
