"""Bulk publication: a large RDF document (a library's catalogue) read once and cut into batches
that the ``peer publish`` command sends to the daemon one control request each.

Why batches. A document goes to the daemon in control frames (``peer.control.CONTROL_LIMITS``)
and the daemon reads it with the language's limits (``qel.Limits.max_document_bytes``): a
catalogue of 200,000 resources is larger than both. A publication is what a document says about
one subject, so the command groups the triples by subject and sends whole resources, a batch at
most ``max_bytes`` of N-Triples and ``max_resources`` resources.

Why the batches are the same on every run. Subjects are sorted and cut greedily, so the same
document gives the same batches, numbered from 0; the daemon keeps which of them the access point
answered in the job of the document (``peer.jobs``, keyed by ``document_key``), and running the
same command again sends only the others. A publication's id is a hash of its triples
(``qel.parse_publications``), so a batch sent twice publishes the same versions: the access point
answers a repeat without a new version and subscribers' inboxes take a version once.

What the network could never accept is refused here, per resource, with the reason, instead of
failing the whole document: a blank node as subject or object, more triples about one subject
than ``max_triples_per_publication``, one resource larger than a batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Final

import rdflib
from rdflib.parser import Parser, create_input_source
from rdflib.term import BNode

import qel
from qel.rdf import FORMATS, read_graph

BATCH_BYTES: Final = 1024 * 1024
"""Default most N-Triples bytes in one batch: well under the control frame (16 MiB) and the
daemon's ``max_document_bytes`` (4 MiB), and small enough that an interruption repeats little."""
BATCH_RESOURCES: Final = 2000
"""Default most resources in one batch (requests the daemon has in flight at once)."""
BATCHES_IN_FLIGHT: Final = 2
"""Default batches sent before the first is answered: the daemon reads the next one while the
access point answers this one (each is a control connection of its own)."""
MAX_DOCUMENT_BYTES: Final = 2 * 1024 * 1024 * 1024
"""The largest document ``peer publish`` reads in batches (rdflib holds its triples in memory
while it reads: about 1.3 KB of memory per resource of four triples, measured)."""


class BulkError(ValueError):
    """The document cannot be read at all (its syntax, its format, its size)."""


@dataclass(frozen=True, slots=True)
class Resource:
    """What the document says about one subject, as N-Triples lines (a document of its own)."""

    subject: str
    text: str


@dataclass(frozen=True, slots=True)
class Reading:
    """A document read for bulk publication: its resources sorted by subject, and those refused
    here with the reason (subject, reason)."""

    resources: tuple[Resource, ...]
    refused: tuple[tuple[str, str], ...] = ()


def document_key(raw: bytes, format: str, max_bytes: int, max_resources: int) -> str:
    """The job's name: the same bytes in the same format cut into the same batches are the
    same job (other batch sizes are another job, whose resources are repeats where the first
    one published them)."""
    digest = hashlib.sha256(f"{format} {max_bytes} {max_resources}\n".encode())
    digest.update(raw)
    return digest.hexdigest()[:32]


class _Grouping(rdflib.Graph):
    """A graph that keeps nothing but each subject's N-Triples lines: the parsers call ``add``
    per triple, and rdflib's own store would take several times the memory."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[object, list[str]] = {}
        self.blank_objects: set[object] = set()

    def add(self, triple):  # type: ignore[no-untyped-def,override]
        subject, predicate, obj = triple
        if isinstance(obj, BNode):
            self.blank_objects.add(subject)
        self.lines.setdefault(subject, []).append(f"{subject.n3()} {predicate.n3()} {obj.n3()} .")
        return self


def read(
    raw: bytes,
    format: str = "turtle",
    *,
    max_bytes: int = BATCH_BYTES,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
    limits: qel.Limits = qel.DEFAULT_LIMITS,
) -> Reading:
    """The resources of a document, one per subject, sorted by subject; ``BulkError`` when the
    document cannot be read."""
    rdf_format = FORMATS.get(format.lower())
    if rdf_format is None:
        known = ", ".join(sorted(set(FORMATS.values())))
        raise BulkError(f"unknown RDF format {format!r} (known: {known})")
    if len(raw) > max_document_bytes:
        raise BulkError(f"the document is larger than {max_document_bytes} bytes")
    sink = _Grouping()
    try:
        if rdf_format == "json-ld":  # read as the daemon reads it: no remote contexts
            big = replace(limits, max_document_bytes=max_document_bytes)
            for triple in read_graph(raw, rdf_format, big, qel.PublicationError):
                sink.add(triple)
        else:
            parser = rdflib.plugin.get(rdf_format, Parser)()
            parser.parse(create_input_source(data=raw, format=rdf_format), sink)
    except qel.QelError as error:
        raise BulkError(str(error)) from None
    except Exception as problem:  # rdflib's parsers raise many unrelated types for bad syntax
        raise BulkError(f"cannot read the {rdf_format} document: {problem}") from None
    if not sink.lines:
        raise BulkError("the document holds no triples")
    resources, refused = [], []
    most = limits.max_triples_per_publication
    for subject in sorted(sink.lines, key=str):
        lines = sink.lines[subject]
        text = "\n".join(sorted(set(lines))) + "\n"
        if isinstance(subject, BNode):
            refused.append((subject.n3(), "a blank node is the subject: a resource needs a URI"))
        elif subject in sink.blank_objects:
            refused.append(
                (str(subject), "a blank node is an object: describe it with its own URI")
            )
        elif len(set(lines)) > most:
            refused.append(
                (str(subject), f"more than {most} triples about it (max_triples_per_publication)")
            )
        elif len(text.encode()) > max_bytes:
            refused.append((str(subject), f"larger than a batch ({max_bytes} bytes)"))
        else:
            resources.append(Resource(str(subject), text))
    return Reading(tuple(resources), tuple(refused))


@dataclass(frozen=True, slots=True)
class Batch:
    number: int
    resources: tuple[Resource, ...]

    @property
    def text(self) -> str:
        """The batch as one N-Triples document."""
        return "".join(r.text for r in self.resources)


def batches(
    resources: tuple[Resource, ...],
    *,
    max_bytes: int = BATCH_BYTES,
    max_resources: int = BATCH_RESOURCES,
) -> list[Batch]:
    """``resources`` cut in order into batches of at most ``max_resources`` resources and
    ``max_bytes`` bytes (a resource larger than ``max_bytes`` is refused by ``read``)."""
    if max_resources < 1 or max_bytes < 1:
        raise ValueError("a batch holds at least one resource of at least one byte")
    return [Batch(n, chunk) for n, chunk in enumerate(_cut(resources, max_bytes, max_resources))]


def _cut(
    resources: tuple[Resource, ...], max_bytes: int, max_resources: int
) -> Iterator[tuple[Resource, ...]]:
    chunk: list[Resource] = []
    size = 0
    for resource in resources:
        length = len(resource.text.encode())
        if chunk and (len(chunk) == max_resources or size + length > max_bytes):
            yield tuple(chunk)
            chunk, size = [], 0
        chunk.append(resource)
        size += length
    if chunk:
        yield tuple(chunk)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a running ``peer publish`` shows: resources answered of all, and this run's rate."""

    done: int
    total: int
    rate: float

    def line(self, width: int = 30) -> str:
        share = self.done / self.total if self.total else 1.0
        filled = int(width * share)
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%} "
            f"{self.done:,}/{self.total:,} resources, {self.rate:,.0f}/s"
        )
