"""A publication that names a downloadable resource: its SHA-256 and size, as two reserved
statements about the published subject (seed 004, Section 5.1: a notification names the resource
and its owner; the requester must be able to check what it later downloads).

The descriptor travels inside the publication, so every path a notification takes (routing, mail,
catch-up, handover) carries it without knowing about it. Its predicates are outside every schema
a peer advertises, and an advertisement says what a peer publishes *about* resources, not whether
it offers their bytes: advertisements always allow them (``qel.advertisements``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Final

from qel.errors import PublicationError
from qel.model import Publication
from qel.terms import URI, Literal

SHA256: Final = URI("urn:semantic-pubsub:resource:sha256")
SIZE: Final = URI("urn:semantic-pubsub:resource:size")
DESCRIPTOR_PREDICATES: Final = frozenset({SHA256, SIZE})
_XSD_INTEGER: Final = "http://www.w3.org/2001/XMLSchema#integer"
_HEX64: Final = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """What a requester checks a downloaded resource against."""

    sha256: str
    size: int

    def __post_init__(self) -> None:
        if not _HEX64.fullmatch(self.sha256):
            raise PublicationError(f"not a SHA-256 in lower-case hex: {self.sha256!r}")
        if self.size < 0:
            raise PublicationError(f"a resource's size cannot be negative: {self.size}")


def is_descriptor(predicate: URI) -> bool:
    return predicate in DESCRIPTOR_PREDICATES


def with_resource(publication: Publication, resource: Resource) -> Publication:
    """``publication`` with ``resource``'s descriptor (replacing any it had)."""
    kept = {(p, o) for p, o in publication.statements if not is_descriptor(p)}
    kept.add((SHA256, Literal(resource.sha256)))
    kept.add((SIZE, Literal(str(resource.size), _XSD_INTEGER)))
    return Publication(publication.subject, frozenset(kept), publication.publisher, publication.id)


def resource_of(publication: Publication) -> Resource | None:
    """The resource a publication offers, None if it offers none; ``PublicationError`` when its
    descriptor is malformed (two hashes, a size that is not an integer, ...)."""
    hashes = [o for p, o in publication.statements if p == SHA256]
    sizes = [o for p, o in publication.statements if p == SIZE]
    if not hashes and not sizes:
        return None
    if len(hashes) != 1 or len(sizes) != 1:
        raise PublicationError(
            f"the publication {publication.id!r} needs exactly one resource hash and one size"
        )
    digest, size = hashes[0], sizes[0]
    if not isinstance(digest, Literal) or not isinstance(size, Literal):
        raise PublicationError(f"the resource descriptor of {publication.id!r} is not literals")
    if not size.lexical.isdigit():
        raise PublicationError(f"the resource size of {publication.id!r} is not an integer")
    return Resource(sha256=digest.lexical, size=int(size.lexical))


def rendezvous_key(requester: str, owner: str, publication: str) -> str:
    """The one name of a rendezvous, the same at the requester, its access point and the
    owner's: asking twice for the same resource is the same rendezvous."""
    text = "\0".join((requester, owner, publication))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
