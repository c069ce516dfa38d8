"""Named, configurable limits on what the language accepts.

A super-peer parses text from strangers; each limit bounds the work or memory one input can cost.
Every parse function takes ``limits=`` and raises the matching error, naming the limit, when an
input exceeds it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    max_query_chars: int = 64 * 1024
    """Longest subscription text."""
    max_patterns: int = 64
    """Most triple patterns in one subscription."""
    max_disjuncts: int = 256
    """Most conjunctions in a subscription's DNF (after rewriting ``!=``, ``!`` and distribution)."""
    max_atoms: int = 1024
    """Most atomic constraints in a subscription's DNF, summed over its conjunctions."""
    max_nesting: int = 64
    """Deepest nesting of parentheses in the QEL text form (and of a SPARQL filter)."""
    max_string_chars: int = 4096
    """Longest string constant in a subscription or advertisement."""
    max_document_bytes: int = 4 * 1024 * 1024
    """Largest RDF document handed to ``parse_publications``."""
    max_triples_per_publication: int = 10_000
    """Most triples about one subject in one publication."""
    max_advertisement_elements: int = 100_000
    """Most schemas + properties + values in one advertisement."""
    max_schema_axioms: int = 10_000
    """Most RDFS axioms in one schema document (``qel.parse_schema``)."""


DEFAULT_LIMITS = Limits()
