"""Prefixes every parser knows without a declaration, and QName expansion/compaction."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

WELL_KNOWN: Final[Mapping[str, str]] = MappingProxyType(
    {
        "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
        "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
        "xsd": "http://www.w3.org/2001/XMLSchema#",
        "owl": "http://www.w3.org/2002/07/owl#",
        "dc": "http://purl.org/dc/elements/1.1/",
        "dcterms": "http://purl.org/dc/terms/",
        "foaf": "http://xmlns.com/foaf/0.1/",
        "lom": "http://ltsc.ieee.org/2002/09/lom-base#",
        "isl": "http://www.intelligence.tuc.gr/publications/",
    }
)


def compact(iri: str, prefixes: Mapping[str, str] = WELL_KNOWN) -> str | None:
    """``prefix:local`` for an IRI when a prefix fits and the local part is a plain name."""
    best: tuple[int, str] | None = None
    for name, base in prefixes.items():
        if iri.startswith(base) and (best is None or len(base) > best[0]):
            local = iri[len(base) :]
            if _plain_local(local):
                best = (len(base), f"{name}:{local}")
    return best[1] if best else None


def _plain_local(local: str) -> bool:
    if not local:
        return True
    if not (local[0].isalnum() or local[0] == "_") or local.endswith("."):
        return False
    return all(ch.isalnum() or ch in "_-." for ch in local)
