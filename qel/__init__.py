"""QEL: the subscription language of the network (the design paper's Section 2, Definitions 1-8).

Subscriptions are single-resource, multi-predicate queries over RDF; publications are sets of triples
about one subject; advertisements say what a peer will publish. This package parses them (a QEL text
form, a SPARQL subset via rdflib, RDF documents via rdflib, advertisements from JSON/TOML), and
answers the three questions routing depends on: ``matches``, ``covers`` and ``advertisement_covers``.
RDFS schemas (``parse_schema``) give a publication's closure before matching (``Schema.entail``)
and the advertisement closure that keeps routing complete under it (``Schema.close``).
"""

from __future__ import annotations

import re

from qel.advertisement_json import parse_advertisement
from qel.advertisements import (
    Advertisement,
    Element,
    OpenElement,
    PropertyElement,
    SchemaElement,
    ValueElement,
    advertisement_allows,
    advertisement_covers,
    disallowed_triples,
    elements_cover,
)
from qel.axioms import Axiom, parse_schema
from qel.constraints import Atom, Constraint, satisfiable
from qel.covering import covers
from qel.entailment import Schema
from qel.errors import AdvertisementError, PublicationError, QelError, QueryError, SchemaError
from qel.filters import Filter
from qel.limits import DEFAULT_LIMITS, Limits
from qel.matching import matches
from qel.model import Pattern, Publication, Subscription, properties, schemas
from qel.qel_text import parse_qel
from qel.rdf import parse_publication_text, parse_publications
from qel.sparql import parse_sparql
from qel.terms import RDF_TYPE, URI, Literal, Term, namespace

_SPARQL_START = re.compile(
    r"\s*(?:(?:#[^\n]*\n|\s)*(?:PREFIX\s+[^\s:]*:\s*<[^>]*>|BASE\s*<[^>]*>)\s*)*"
    r"(?:#[^\n]*\n|\s)*(SELECT|ASK|CONSTRUCT|DESCRIBE)\b",
    re.IGNORECASE,
)


def parse_subscription(text: str, *, limits: Limits = DEFAULT_LIMITS) -> Subscription:
    """A subscription from SPARQL (``SELECT``/``ASK``, see ``qel.sparql``) or QEL text (see
    ``qel.qel_text``), told apart by the first keyword after any prefix declarations."""
    if not isinstance(text, str):
        raise QueryError(f"a subscription is text, got {type(text).__name__}")
    if _SPARQL_START.match(text):
        return parse_sparql(text, limits=limits)
    return parse_qel(text, limits=limits)


__all__ = [
    "DEFAULT_LIMITS",
    "RDF_TYPE",
    "URI",
    "Advertisement",
    "AdvertisementError",
    "Atom",
    "Axiom",
    "Constraint",
    "Element",
    "Filter",
    "Limits",
    "Literal",
    "OpenElement",
    "Pattern",
    "PropertyElement",
    "Publication",
    "PublicationError",
    "QelError",
    "QueryError",
    "Schema",
    "SchemaElement",
    "SchemaError",
    "Subscription",
    "Term",
    "ValueElement",
    "advertisement_allows",
    "advertisement_covers",
    "covers",
    "disallowed_triples",
    "elements_cover",
    "matches",
    "namespace",
    "parse_advertisement",
    "parse_publication_text",
    "parse_publications",
    "parse_qel",
    "parse_schema",
    "parse_sparql",
    "parse_subscription",
    "properties",
    "satisfiable",
    "schemas",
]
